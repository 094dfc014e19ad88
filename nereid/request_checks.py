"""Check an inference request against the model's config and shape its inputs for the backend."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nereid.errors import InvalidArgument
from nereid.repository.model import ModelVersion, TensorSpec
from nereid.types import InferRequest, RequestedOutput


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims))


def backend_inputs(model: ModelVersion, request: InferRequest) -> dict[str, np.ndarray]:
    """Inputs keyed by name, reshaped to what the backend expects; raises on any mismatch."""
    prefix = f"[request id: {request.id}] " if request.id else ""
    by_name: dict[str, np.ndarray] = {}
    batch_size: int | None = None
    for tensor in request.inputs:
        spec = model.inputs.get(tensor.name)
        if spec is None:
            raise InvalidArgument(
                f"{prefix}unexpected inference input '{tensor.name}' for model '{model.name}'"
            )
        if tensor.name in by_name:
            raise InvalidArgument(f"{prefix}input '{tensor.name}' is given more than once for model '{model.name}'")
        if tensor.datatype != spec.datatype:
            raise InvalidArgument(
                f"{prefix}inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                f"'{model.name}' expects '{spec.datatype}'"
            )
        shape = tensor.shape
        if model.max_batch_size > 0:
            expected = (-1, *spec.dims)
            if not shape or not _matches(shape[1:], spec.dims):
                raise _shape_error(prefix, tensor.name, model.name, expected, shape)
            if shape[0] < 1 or shape[0] > model.max_batch_size:
                raise InvalidArgument(
                    f"{prefix}inference request batch-size must be <= {model.max_batch_size} for "
                    f"'{model.name}'"
                )
            if batch_size is None:
                batch_size = shape[0]
            elif batch_size != shape[0]:
                raise InvalidArgument(
                    f"{prefix}input '{tensor.name}' batch size does not match other inputs for '{model.name}'"
                )
        elif not _matches(shape, spec.dims):
            raise _shape_error(prefix, tensor.name, model.name, spec.dims, shape)
        by_name[tensor.name] = _to_backend_shape(tensor.data, spec, shape, model.max_batch_size > 0)
    missing = [name for name, spec in model.inputs.items() if name not in by_name and not spec.optional]
    if missing:
        given = sorted(by_name)
        raise InvalidArgument(
            f"{prefix}expected {len(model.inputs)} inputs but got {len(by_name)} inputs for model "
            f"'{model.name}'. Got input(s) {given}, but missing required input(s) {missing}. Please "
            "provide all required input(s)."
        )
    return by_name


def _shape_error(prefix: str, name: str, model: str, expected: Sequence[int], got: Sequence[int]) -> InvalidArgument:
    return InvalidArgument(
        f"{prefix}unexpected shape for input '{name}' for model '{model}'. Expected "
        f"{_shape_text(expected)}, got {_shape_text(got)}."
    )


def _to_backend_shape(data: np.ndarray, spec: TensorSpec, shape: Sequence[int], batched: bool) -> np.ndarray:
    if spec.backend_dims is None:
        return data
    target = ((shape[0],) if batched else ()) + spec.backend_dims
    return data.reshape(target)


def requested_outputs(model: ModelVersion, request: InferRequest) -> list[RequestedOutput]:
    """The outputs to compute: those asked for (checked), or all of them."""
    if request.outputs is None:
        return [RequestedOutput(name) for name in model.output_names]
    seen: set[str] = set()
    for output in request.outputs:
        if output.name not in model.outputs:
            raise InvalidArgument(f"unexpected inference output '{output.name}' for model '{model.name}'")
        if output.name in seen:
            raise InvalidArgument(f"output '{output.name}' is requested more than once for model '{model.name}'")
        seen.add(output.name)
        if output.class_count < 0:
            raise InvalidArgument(f"output '{output.name}': classification count must be positive")
    return request.outputs
