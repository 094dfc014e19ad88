"""Check an inference request against the model's config and shape its inputs for the backend.

Checks run in Triton's order (requested outputs, input count, input names, batch size, then each
input's data type and shape) with Triton's wording, so clients see the same first error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nereid.errors import InvalidArgument, request_prefix
from nereid.repository.model import ModelVersion
from nereid.types import InferRequest, InferTensor, RequestedOutput

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in your "
    "input dims config, try setting max_batch_size to zero. See the model configuration docs for more info "
    "on max_batch_size."
)


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(names: Sequence[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims, strict=False))


def requested_outputs(model: ModelVersion, request: InferRequest) -> Sequence[RequestedOutput]:
    """The outputs to compute: those asked for (checked; one name twice is refused, as Triton does), or
    all of them."""
    if not request.outputs:
        return model.all_outputs
    chosen: dict[str, RequestedOutput] = {}
    for output in request.outputs:
        if output.name not in model.outputs:
            raise InvalidArgument(f"unexpected inference output '{output.name}' for model '{model.name}'")
        if output.name in chosen:
            raise InvalidArgument(
                f"{request_prefix(request.id)}output '{output.name}' already exists in request"
            )
        chosen[output.name] = output
    return tuple(chosen.values())


# Layouts a model version keeps as checked at most; past that the set starts again.
MAX_CHECKED_LAYOUTS = 256


def checked_request(
    model: ModelVersion, request: InferRequest
) -> tuple[dict[str, np.ndarray], Sequence[RequestedOutput], tuple[str, ...]]:
    """`backend_inputs`, `requested_outputs` and their names. A request whose layout passed them before
    skips the checks, which read nothing a layout leaves open (input names, datatypes and shapes, outputs
    asked for), so it would pass them again; the layout keeps the output names it asks for. Layouts whose
    inputs the backend sees reshaped are not kept."""
    layout = request.layout
    checked = model.checked_layouts
    if layout is not None:
        names = checked.get(layout)
        if names is not None:
            inputs = {}  # a loop, not a comprehension: no function call on every request
            for tensor in reversed(request.inputs):
                inputs[tensor.name] = tensor.data
            return inputs, request.outputs or model.all_outputs, names
    inputs = backend_inputs(model, request)
    wanted = requested_outputs(model, request)
    names = tuple([o.name for o in wanted])
    if layout is not None and all(model.inputs[name].backend_dims is None for name in inputs):
        if len(checked) >= MAX_CHECKED_LAYOUTS:
            checked.clear()
        checked[layout] = names
    return inputs, wanted, names


def backend_inputs(model: ModelVersion, request: InferRequest) -> dict[str, np.ndarray]:
    """Inputs keyed by name, reshaped to what the backend expects; raises on any mismatch."""
    specs = model.inputs
    tensors = request.inputs
    given = {tensor.name: tensor for tensor in tensors}
    if len(given) != len(tensors):
        seen: set[str] = set()
        for tensor in tensors:
            if tensor.name in seen:
                raise InvalidArgument(
                    f"{request_prefix(request.id)}input '{tensor.name}' already exists in request"
                )
            seen.add(tensor.name)
    required = model.required_inputs
    if len(given) < len(required) or len(given) > len(specs):
        raise _count_error(request_prefix(request.id), model, list(given), required)
    # Triton walks the inputs last to first, so the last bad input is the one it reports.
    ordered = tensors[::-1]
    for tensor in ordered:
        if tensor.name not in specs:
            raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{model.name}'")
    if len(given) != len(specs) and any(name not in given for name in required):
        raise _count_error(request_prefix(request.id), model, list(given), required)
    batched = model.max_batch_size > 0
    if batched:
        _check_batch(model, ordered, request)
    result: dict[str, np.ndarray] = {}
    for tensor in ordered:
        spec = specs[tensor.name]
        if tensor.datatype != spec.datatype:
            raise InvalidArgument(
                f"{request_prefix(request.id)}inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                f"but model '{model.name}' expects '{spec.datatype}'"
            )
        dims = tensor.shape[1:] if batched else tensor.shape
        if dims != spec.dims and not _matches(dims, spec.dims):
            expected = ((-1,) if batched else ()) + spec.dims
            note = _BATCH_NOTE if batched else " "
            raise InvalidArgument(
                f"{request_prefix(request.id)}unexpected shape for input '{tensor.name}' for model "
                f"'{model.name}'. Expected {_shape_text(expected)}, got {_shape_text(tensor.shape)}.{note}"
            )
        data = tensor.data
        if spec.backend_dims is not None:
            data = data.reshape(((tensor.shape[0],) if batched else ()) + spec.backend_dims)
        result[tensor.name] = data
    return result


def _count_error(
    prefix: str, model: ModelVersion, given: list[str], required: Sequence[str]
) -> InvalidArgument:
    missing = [name for name in required if name not in given]
    total = len(model.inputs)
    # Triton names the range when some inputs are optional
    if len(required) == total:
        expected = f"{total} inputs"
    else:
        expected = f"number of inputs between {len(required)} and {total}"
    return InvalidArgument(
        f"{prefix}expected {expected} but got {len(given)} inputs for model "
        f"'{model.name}'. Got input(s) {_names(given)}, but missing required input(s) "
        f"{_names(missing)}. Please provide all required input(s)."
    )


def _check_batch(model: ModelVersion, ordered: list[InferTensor], request: InferRequest) -> None:
    batch = ordered[0].shape[0] if ordered and ordered[0].shape else 0
    for tensor in ordered:
        if not tensor.shape:
            raise InvalidArgument(
                f"{request_prefix(request.id)}input '{tensor.name}' has no shape but model requires batch "
                f"dimension for '{model.name}'"
            )
        if tensor.shape[0] != batch:
            raise InvalidArgument(
                f"{request_prefix(request.id)}input '{tensor.name}' batch size does not match other inputs "
                f"for '{model.name}'"
            )
    if batch > model.max_batch_size:
        raise InvalidArgument(
            f"{request_prefix(request.id)}inference request batch-size must be <= {model.max_batch_size} for "
            f"'{model.name}'"
        )
    if batch == 0 and ordered:
        raise InvalidArgument(
            f"{request_prefix(request.id)}inference request batch-size must be >= 1 for '{model.name}'"
        )


def inputs_batch_size(model: ModelVersion, request: InferRequest) -> int:
    """Batch elements a checked request carries: its first dimension when the model batches, else 1."""
    if model.max_batch_size > 0 and request.inputs and request.inputs[0].shape:
        return request.inputs[0].shape[0]
    return 1
