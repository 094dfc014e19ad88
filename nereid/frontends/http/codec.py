"""Infer request/response bodies: JSON tensors and Triton's binary tensor data extension."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from nereid.datatypes import WIRE_DATATYPES, deserialize_bytes, element_size, numpy_dtype, tensor_to_bytes
from nereid.errors import InvalidArgument, Unsupported
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY

# numpy kinds that JSON data of each datatype family may arrive as
_INT_KINDS = frozenset("iu")
_FLOAT_KINDS = frozenset("iuf")


def decode_infer_request(
    body: bytes, header_length: int | None, model_name: str, model_version: str
) -> InferRequest:
    """Parse an infer body. `header_length` is the Inference-Header-Content-Length value, if sent."""
    if header_length is None:
        header, binary = body, b""
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgument(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        header, binary = body[:header_length], body[header_length:]
    try:
        document = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("the request JSON must be an object")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("the request 'id' must be a string")
    parameters = _parameters(document.get("parameters"), "request")
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgument("the request JSON must have an 'inputs' array")
    view = memoryview(binary)
    offset = 0
    inputs: list[InferTensor] = []
    for raw in raw_inputs:
        tensor, used = _decode_input(raw, view, offset)
        offset += used
        inputs.append(tensor)
    if offset != len(binary):
        raise InvalidArgument(
            f"unexpected additional input data: {len(binary) - offset} bytes of binary data are not "
            "claimed by any input's 'binary_data_size'"
        )
    outputs = _decode_outputs(document.get("outputs"))
    return InferRequest(model_name, model_version, inputs, outputs, request_id, parameters)


def decode_raw_binary_request(body: bytes, model_name: str, model_version: str, input_name: str,
                              datatype: str, shape: tuple[int, ...]) -> InferRequest:
    """The header-less form: the whole body is the one input of the model (batch 1)."""
    data = _from_binary(memoryview(body), datatype, shape, input_name)
    tensor = InferTensor(input_name, datatype, shape, data)
    return InferRequest(model_name, model_version, [tensor], None, "", {"binary_data_output": True})


def _parameters(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"the {where} 'parameters' must be an object")
    return value


def _decode_input(raw: Any, binary: memoryview, offset: int) -> tuple[InferTensor, int]:
    if not isinstance(raw, dict):
        raise InvalidArgument("each element of 'inputs' must be an object")
    name = raw.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("an input is missing its 'name' string")
    datatype = raw.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidArgument(f"input '{name}' is missing its 'datatype' string")
    if datatype not in WIRE_DATATYPES:
        raise InvalidArgument(f"input '{name}' has invalid datatype '{datatype}'")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise InvalidArgument(f"input '{name}' is missing its 'shape' array of integers")
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"input '{name}' has a negative dimension in its shape {shape}")
    shape_t = tuple(shape)
    parameters = _parameters(raw.get("parameters"), f"input '{name}'")
    if "shared_memory_region" in parameters:
        raise Unsupported(f"input '{name}': shared memory inputs are not supported yet")
    size = parameters.get("binary_data_size")
    if size is not None:
        if type(size) is not int or size < 0:
            raise InvalidArgument(f"input '{name}': 'binary_data_size' must be a non-negative integer")
        if "data" in raw:
            raise InvalidArgument(f"input '{name}' has both 'data' and 'binary_data_size'")
        if offset + size > len(binary):
            raise InvalidArgument(
                f"unexpected size for input '{name}': binary_data_size is {size} but only "
                f"{len(binary) - offset} bytes of binary data remain"
            )
        data = _from_binary(binary[offset : offset + size], datatype, shape_t, name)
        return InferTensor(name, datatype, shape_t, data, parameters), size
    if "data" not in raw:
        raise InvalidArgument(f"input '{name}' has neither 'data' nor 'binary_data_size'")
    data = _from_json(raw["data"], datatype, shape_t, name)
    return InferTensor(name, datatype, shape_t, data, parameters), 0


def _from_binary(buffer: memoryview, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    count = math.prod(shape)
    if datatype == "BYTES":
        return deserialize_bytes(buffer, count, name).reshape(shape)
    expected = count * element_size(datatype)
    if len(buffer) != expected:
        raise InvalidArgument(
            f"unexpected total byte size {len(buffer)} for input '{name}', expecting {expected}"
        )
    # zero copy: the array is a view on the request body
    return np.frombuffer(buffer, dtype=numpy_dtype(datatype)).reshape(shape)


def _from_json(data: Any, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    count = math.prod(shape)
    if datatype in ("FP16", "BF16"):
        raise InvalidArgument(
            f"receiving {datatype} data via JSON is not supported; use the binary data extension for "
            f"input '{name}'"
        )
    if not isinstance(data, list):
        data = [data]
    if datatype == "BYTES":
        flat = _flatten(data)
        if len(flat) != count:
            raise _count_error(name, count, len(flat))
        array = np.empty(count, dtype=np.object_)
        for i, item in enumerate(flat):
            if not isinstance(item, str):
                raise InvalidArgument(f"input '{name}': BYTES elements must be JSON strings, got {item!r}")
            array[i] = item.encode("utf-8")
        return array.reshape(shape)
    try:
        parsed = np.array(data)
    except (ValueError, TypeError):
        raise InvalidArgument(f"input '{name}': 'data' must be a flat or regularly nested array") from None
    if parsed.size != count:
        raise _count_error(name, count, parsed.size)
    dtype = numpy_dtype(datatype)
    kind = parsed.dtype.kind
    if count == 0:
        return np.empty(shape, dtype=dtype)
    if datatype == "BOOL":
        if kind != "b":
            raise _type_error(name, datatype, parsed)
    elif dtype.kind in "iu":
        if kind not in _INT_KINDS:
            raise _type_error(name, datatype, parsed)
        info = np.iinfo(dtype)
        if parsed.min() < info.min or parsed.max() > info.max:
            raise InvalidArgument(f"input '{name}': a value is out of range for {datatype}")
    elif kind not in _FLOAT_KINDS:
        raise _type_error(name, datatype, parsed)
    return parsed.astype(dtype, copy=False).reshape(shape)


def _flatten(data: list[Any]) -> list[Any]:
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _count_error(name: str, expected: int, got: int) -> InvalidArgument:
    return InvalidArgument(
        f"unexpected number of elements for input '{name}': its shape holds {expected}, 'data' has {got}"
    )


def _type_error(name: str, datatype: str, parsed: np.ndarray) -> InvalidArgument:
    found = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers with a fraction",
             "U": "strings"}.get(parsed.dtype.kind, "mixed values")
    return InvalidArgument(f"input '{name}': {datatype} data must be JSON {_wanted(datatype)}, got {found}")


def _wanted(datatype: str) -> str:
    if datatype == "BOOL":
        return "booleans"
    return "integers" if datatype.startswith(("INT", "UINT")) else "numbers"


def _decode_outputs(raw: Any) -> list[RequestedOutput] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidArgument("the request 'outputs' must be an array")
    outputs: list[RequestedOutput] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgument("each requested output must be an object with a 'name' string")
        parameters = _parameters(item.get("parameters"), f"output '{item['name']}'")
        if "shared_memory_region" in parameters:
            raise Unsupported(f"output '{item['name']}': shared memory outputs are not supported yet")
        binary = parameters.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise InvalidArgument(f"output '{item['name']}': 'binary_data' must be a boolean")
        count = parameters.get("classification", 0)
        if type(count) is not int or count < 0:
            raise InvalidArgument(f"output '{item['name']}': 'classification' must be a non-negative integer")
        outputs.append(RequestedOutput(item["name"], binary, count, parameters))
    return outputs


def encode_infer_response(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """The response body and, when binary tensors follow the JSON, the JSON header's length."""
    default_binary = request.parameters.get("binary_data_output", False) is True
    binary_by_name = {o.name: o.binary for o in request.outputs or ()}
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in response.outputs:
        binary = binary_by_name.get(tensor.name)
        if binary is None:
            binary = default_binary
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if binary:
            blob = tensor_to_bytes(tensor.data, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = orjson.dumps(document, option=_JSON_OPTIONS)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def _json_data(tensor: InferTensor) -> Any:
    flat = tensor.data.reshape(-1)
    if tensor.datatype == "BYTES":
        return [_text(item) for item in flat]
    if tensor.datatype in ("FP16", "BF16"):
        return flat.astype(np.float32)
    return np.ascontiguousarray(flat)


def _text(item: Any) -> str:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    return str(item)


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
