"""The request the analyzer sends: one tensor per model input, zeros, random values or a file's data.

`--input-data FILE` is perf_analyzer's JSON (`{"data": [{"INPUT0": [...] | {"content": [...], "shape":
[...]}}]}`, its first entry), or, for a model whose one input is BYTES, the file's own bytes (an image
for the OCR ensemble).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nereid.datatypes import config_to_wire, numpy_dtype, tensor_to_bytes


class InputError(ValueError):
    """The input data cannot make a request for this model."""


@dataclass(frozen=True)
class InputTensor:
    name: str
    datatype: str  # the wire's: FP32, BYTES, ...
    shape: tuple[int, ...]
    data: bytes  # raw contents (BYTES: 4-byte length before each element)


def _shape(name: str, dims: list[Any], batched: bool, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    if name in shapes:
        shape = shapes[name]
    else:
        shape = tuple(1 if int(d) < 0 else int(d) for d in dims)
    return ((1,) if batched else ()) + shape


def _array(datatype: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
    count = math.prod(shape)
    if datatype == "BYTES":
        rng = np.random.default_rng(0)
        items = [bytes(rng.integers(97, 123, 8, dtype=np.uint8)) if kind == "random" else b"0"] * count
        return np.array(items, dtype=np.object_).reshape(shape)
    dtype = numpy_dtype(datatype)
    if kind == "zero":
        return np.zeros(shape, dtype=dtype)
    rng = np.random.default_rng(0)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.random(shape).astype(dtype)


def _from_json(entry: Any, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    if isinstance(entry, dict):
        content, shape = entry.get("content"), tuple(entry.get("shape", shape))
    else:
        content = entry
    if datatype == "BYTES":
        items = [str(x).encode() for x in np.ravel(np.array(content, dtype=np.object_))]
        return np.array(items, dtype=np.object_).reshape(shape)
    try:
        return np.array(content, dtype=numpy_dtype(datatype)).reshape(shape)
    except ValueError as exc:
        raise InputError(
            f"input '{name}': the data file's values do not fill shape {list(shape)}: {exc}"
        ) from None


def request_inputs(
    config: dict[str, Any], data: str, shapes: dict[str, tuple[int, ...]] | None = None
) -> list[InputTensor]:
    """One batch-1 request for the model whose config JSON is `config`; `data`: zero, random or a file."""
    shapes = shapes or {}
    batched = int(config.get("max_batch_size", 0)) > 0
    inputs = config.get("input", [])
    document: dict[str, Any] | None = None
    raw: bytes | None = None
    if data not in ("zero", "random"):
        path = Path(data)
        if not path.is_file():
            raise InputError(f"--input-data: no file '{data}' (expected zero, random or a file)")
        content = path.read_bytes()
        try:
            parsed = json.loads(content)
            document = parsed["data"][0] if isinstance(parsed, dict) and parsed.get("data") else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed = None
        if document is None:
            if len(inputs) != 1 or config_to_wire(inputs[0]["data_type"]) != "BYTES":
                raise InputError(
                    f"--input-data '{data}' is not perf_analyzer's JSON ({{\"data\": [...]}}); raw file "
                    "contents serve only a model with one BYTES input"
                )
            raw = content
    tensors = []
    for spec in inputs:
        name, datatype = spec["name"], config_to_wire(spec["data_type"])
        shape = _shape(name, spec.get("dims", []), batched, shapes)
        if raw is not None:
            array = np.array([raw] * math.prod(shape), dtype=np.object_).reshape(shape)
        elif document is not None:
            if name not in document:
                raise InputError(f"--input-data '{data}' has no data for input '{name}'")
            array = _from_json(document[name], datatype, shape, name)
        else:
            array = _array(datatype, shape, data)
        tensors.append(InputTensor(name, datatype, tuple(array.shape), tensor_to_bytes(array, datatype)))
    return tensors
