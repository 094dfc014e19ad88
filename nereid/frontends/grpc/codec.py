"""ModelInferRequest -> InferRequest and InferResponse -> ModelInferResponse, with Triton's checks and texts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from nereid.datatypes import (
    WIRE_DATATYPES,
    check_string_count,
    element_size,
    numpy_dtype,
    size_mismatch,
    tensor_from_bytes,
    tensor_to_bytes,
)
from nereid.errors import InputDataError, InvalidArgument, request_prefix
from nereid.shared_memory import SharedMemoryRef
from nereid.tensor_data import element_count
from nereid.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    InferTensor,
    Parameters,
    RequestedOutput,
    check_sequence_id,
)

# The typed `contents` field that carries each datatype; FP16 and BF16 have none and need raw bytes.
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
# The datatype Triton names for each field when the field does not match the input's datatype.
_TYPE_OF_FIELD = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
# Reserved request parameters and the kinds of value Triton takes for them.
RESERVED_PARAMETERS = {
    "sequence_id": ("int64_param", "uint64_param", "string_param"),
    "sequence_start": ("bool_param",),
    "sequence_end": ("bool_param",),
    "priority": ("int64_param", "uint64_param"),
    "timeout": ("int64_param",),
}
_ALLOWED_TRITON_KEYS = ("triton_enable_empty_final_response",)
_PLAIN_KINDS = frozenset(("bool_param", "int64_param", "string_param", "double_param"))


def decode_infer_request(message: pb.ModelInferRequest) -> InferRequest:
    """The protocol-neutral request; refuses what Triton refuses, with its wording."""
    model_name = message.model_name
    request_id = message.id
    prefix = request_prefix(request_id)
    request = InferRequest(model_name, message.model_version, [], None, request_id)
    if message.parameters:
        _request_parameters(message.parameters, request)
    raw = message.raw_input_contents
    raw_count = len(raw)
    raw_used = 0  # raw contents go, in order, to the inputs that are not in shared memory
    inputs = request.inputs
    data_error: InputDataError | None = None  # the last input's, as Triton reports it
    for tensor in message.inputs:
        name = tensor.name
        datatype = tensor.datatype
        shape = tuple(tensor.shape)
        tensor_parameters = _tensor_parameters(tensor.parameters) if tensor.parameters else {}
        if "shared_memory_region" in tensor_parameters:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"contents field must not be specified when using shared memory for '{name}' for model "
                    f"'{model_name}'"
                )
            check_shape(shape, name)
            ref = _shared_memory_ref(tensor_parameters, name)
            # the engine, which owns the registered regions, reads the data
            inputs.append(InferTensor(name, datatype, shape, _NO_DATA, tensor_parameters, ref))
            continue
        if raw_count:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"contents field must not be specified when using raw_input_contents for '{name}' for "
                    f"model '{model_name}'"
                )
            if raw_used >= raw_count:
                raise _no_data(name, model_name)
            check_shape(shape, name)
            if datatype not in WIRE_DATATYPES:
                raise InvalidArgument(f"invalid datatype for input {name}")
            try:
                data = tensor_from_bytes(raw[raw_used], datatype, shape, name, model_name, prefix)
            except InputDataError as exc:
                data, data_error = _NO_DATA, exc
            raw_used += 1
        else:
            try:
                data = _from_contents(tensor, datatype, shape, model_name, prefix)
            except InputDataError as exc:
                data, data_error = _NO_DATA, exc
        inputs.append(InferTensor(name, datatype, shape, data, tensor_parameters))
    if raw_count > raw_used:
        raise InvalidArgument(
            f"unexpected additional input data for model '{model_name}': {raw_count} raw_input_contents for "
            f"{raw_used} inputs that take them"
        )
    if data_error is not None:
        raise data_error
    if message.outputs:
        request.outputs = [_requested_output(output) for output in message.outputs]
    return request


_NO_DATA = np.empty(0, dtype=np.uint8)  # placeholder until the engine reads the shared memory region


def _shared_memory_ref(parameters: dict[str, Any], name: str) -> SharedMemoryRef:
    """Where a tensor is (input) or goes (output), from its shared_memory_* parameters."""
    region = parameters["shared_memory_region"]
    if "shared_memory_byte_size" not in parameters:
        raise InvalidArgument(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
            f"tensor '{name}'"
        )
    offset = parameters.get("shared_memory_offset", 0)
    size = parameters["shared_memory_byte_size"]
    if not isinstance(region, str):
        raise InvalidArgument(
            "invalid value type for 'shared_memory_region' parameter, expected string_param"
        )
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", size)):
        if type(value) is not int or value < 0:
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter, expected a non-negative int64_param"
            )
    return SharedMemoryRef(region, offset, size)


def _no_data(name: str, model_name: str) -> InvalidArgument:
    return InvalidArgument(
        f"unable to find data for input tensor '{name}' for model '{model_name}' in request."
    )


def check_shape(shape: tuple[int, ...], name: str) -> int:
    """The elements of an input's shape; refuses negative dimensions and shapes too large to serve."""
    if shape and min(shape) < 0:
        raise InvalidArgument(f"input '{name}' has shape {list(shape)}: dimensions cannot be negative")
    return element_count(shape, name)


def _from_contents(
    tensor: pb.ModelInferRequest.InferInputTensor,
    datatype: str,
    shape: tuple[int, ...],
    model_name: str,
    prefix: str,
) -> np.ndarray:
    """A tensor from the typed `contents` lists."""
    name = tensor.name
    fields = tensor.contents.ListFields() if tensor.HasField("contents") else []
    if not fields:
        check_shape(shape, name)
        if datatype in WIRE_DATATYPES and element_count(shape, name) == 0:
            # protobuf sends an empty list as no list at all: an empty tensor needs no data (as Triton)
            return np.empty(shape, dtype=np.object_ if datatype == "BYTES" else numpy_dtype(datatype))
        raise _no_data(name, model_name)
    field = fields[0][0].name
    if CONTENTS_FIELD.get(datatype) != field:
        expected = datatype if datatype in WIRE_DATATYPES else "<invalid>"
        raise InvalidArgument(
            f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}' of type "
            f"'{_TYPE_OF_FIELD[field]}', expected datatype '{expected}'"
        )
    check_shape(shape, name)
    values = fields[0][1]
    count = element_count(shape, name)
    if datatype == "BYTES":
        check_string_count(len(values), count, name, model_name, prefix)
        array = np.empty(count, dtype=np.object_)
        array[:] = list(values)
        return array.reshape(shape)
    dtype = numpy_dtype(datatype)
    if len(values) != count:
        size = element_size(datatype)
        raise size_mismatch(prefix, name, model_name, count * size, len(values) * size)
    if dtype.itemsize < 4 and dtype.kind in "iu" and count:
        info = np.iinfo(dtype)
        if min(values) < info.min or max(values) > info.max:
            raise InvalidArgument(f"input '{name}': a value is out of range for {datatype}")
    return np.array(values, dtype=dtype).reshape(shape)


def _request_parameters(parameters: Mapping[str, pb.InferParameter], request: InferRequest) -> None:
    """The request's parameters, the reserved ones (checked here, once) into its control fields."""
    result = request.parameters
    for key, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        reserved = RESERVED_PARAMETERS.get(key)
        if reserved is not None:
            if kind not in reserved:
                raise InvalidArgument(
                    f"invalid value type for '{key}' parameter, expected {' or '.join(reserved)}."
                )
            value = getattr(parameter, kind)
            if key == "sequence_id":
                if kind == "string_param":
                    check_sequence_id(value)
                request.sequence_id = value
            elif key == "sequence_start":
                request.flags |= SEQUENCE_START if value else 0
            elif key == "sequence_end":
                request.flags |= SEQUENCE_END if value else 0
            elif key == "priority":
                request.priority = value
            else:
                request.timeout_us = value
            continue
        if key.startswith("triton_") and key not in _ALLOWED_TRITON_KEYS:
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
                f"starting with 'triton_' are allowed: {', '.join(_ALLOWED_TRITON_KEYS)}"
            )
        elif kind not in _PLAIN_KINDS:
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, or string_param."
            )
        result[key] = getattr(parameter, kind)


def decode_request_parameters(parameters: Mapping[str, pb.InferParameter]) -> Parameters:
    """The plain parameters of a request, checked and worded as `decode_infer_request` does."""
    request = InferRequest("", "", [])
    _request_parameters(parameters, request)
    return request.parameters


def _tensor_parameters(parameters: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if kind is not None:
            result[key] = getattr(parameter, kind)
    return result


def _requested_output(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> RequestedOutput:
    name = output.name
    wire_parameters = output.parameters  # a new wrapper at each access: read once
    if not wire_parameters:  # the common case, built directly
        return RequestedOutput(name, None, 0, {}, None)
    parameters = _tensor_parameters(wire_parameters)
    class_count = 0
    if "classification" in wire_parameters:
        if wire_parameters["classification"].WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgument("invalid value type for 'classification' parameter, expected int64_param")
        class_count = parameters["classification"]
        if class_count < 0:
            raise InvalidArgument(
                f"output '{name}': 'classification' must not be negative, got {class_count}"
            )
    shared_memory = None
    if "shared_memory_region" in parameters:
        shared_memory = _shared_memory_ref(parameters, name)
    return RequestedOutput(name, None, class_count, parameters, shared_memory)


def encode_infer_response(response: InferResponse) -> pb.ModelInferResponse:
    """Every output goes in `raw_output_contents`, as Triton always answers."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    # add() and append() fill the repeated fields in place; lists given to the constructor are copied
    outputs = message.outputs
    contents = message.raw_output_contents
    for tensor in response.outputs:
        output = outputs.add()
        output.name = tensor.name
        output.datatype = tensor.datatype
        output.shape.extend(tensor.shape)
        # an output written into the client's shared memory keeps its place with empty contents
        contents.append(
            b"" if tensor.shared_memory is not None else tensor_to_bytes(tensor.data, tensor.datatype)
        )
    if response.parameters:
        set_parameters(message.parameters, response.parameters)
    return message


def set_parameters(target: Any, values: Mapping[str, Any]) -> None:
    """Fill a protobuf map of InferParameter from plain Python values."""
    for key, value in values.items():
        parameter = target[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            if value > 2**63 - 1:
                parameter.uint64_param = value
            else:
                parameter.int64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        else:
            parameter.string_param = str(value)


def load_parameters(
    parameters: Mapping[str, pb.ModelRepositoryParameter], model_name: str
) -> tuple[str | None, dict[str, bytes]]:
    """The `config` override (a string) and the `file:<path>` contents (bytes) of a load request."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if key == "config":
            if kind != "string_param":
                raise InvalidArgument(
                    f"load of model '{model_name}': parameter 'config' must be a string_param"
                )
            config = parameter.string_param
        elif key.startswith("file:"):
            if kind != "bytes_param":
                raise InvalidArgument(
                    f"load of model '{model_name}': parameter '{key}' must be a bytes_param"
                )
            files[key] = parameter.bytes_param
    return config, files
