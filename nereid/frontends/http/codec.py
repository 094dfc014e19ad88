"""Infer request/response bodies: JSON tensors and Triton's binary tensor data extension."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from nereid.datatypes import (
    WIRE_DATATYPES,
    element_size,
    numpy_dtype,
    tensor_from_bytes,
    tensor_to_bytes,
)
from nereid.errors import InputDataError, InternalError, InvalidArgument, request_prefix
from nereid.frontends.http import json_body
from nereid.frontends.http.layouts import LayoutCache
from nereid.shared_memory import SharedMemoryRef
from nereid.shared_memory_requests import SharedMemoryRequests
from nereid.tensor_data import MAX_ELEMENTS, MAX_RANK, shape_too_large
from nereid.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
    check_sequence_id,
)

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY

# numpy kinds that JSON data of each datatype family may arrive as
_INT_KINDS = frozenset("iu")
_INT_BOUNDS = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in ("<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8")
}
_FLOAT_KINDS = frozenset("iuf")
# numpy dtypes of the datatypes whose elements have a fixed size (all but BYTES)
_FIXED_SIZE = {name: numpy_dtype(name) for name in WIRE_DATATYPES if name != "BYTES"}
_INT64_MAX = 2**63 - 1
# Triton's bound on the arrays nested in an input's 'data' (deeper ones are refused, not recursed into)
_MAX_JSON_NESTING = 100


_LAYOUTS = LayoutCache()
_SHARED_MEMORY_REQUESTS = SharedMemoryRequests()  # JSON bodies naming regions for every tensor


def decode_infer_request(
    body: bytes, header_length: int | None, model_name: str, model_version: str
) -> InferRequest:
    """Parse an infer body. `header_length` is the Inference-Header-Content-Length value, if sent."""
    if type(body) is bytes and (header_length is None or header_length == len(body)):
        # JSON alone (the header, if given, is the whole body): one whose tensors are all in shared memory
        # decodes as it did before
        request = _SHARED_MEMORY_REQUESTS.get(body, model_name, model_version)
        if request is None:
            request = _decode(body, header_length, model_name, model_version)
            _SHARED_MEMORY_REQUESTS.learn(request, body, model_name, model_version)
        return request
    if header_length is not None and 0 < header_length <= len(body) and type(body) is bytes:
        # binary tensor data: a JSON header seen before decodes as it did then (see layouts)
        header = body[:header_length]
        layout = _LAYOUTS.get(header)
        if layout is not None:
            request = layout.request(body, header_length, model_name, model_version)
            if request is not None:
                return request
        elif not _LAYOUTS.known(header):
            request = _decode(body, header_length, model_name, model_version)
            _LAYOUTS.remember(header, request, body, len(body) - header_length)
            return request
    return _decode(body, header_length, model_name, model_version)


def _decode(body: bytes, header_length: int | None, model_name: str, model_version: str) -> InferRequest:
    # The binary tensors are read in place, as arrays over `body` from offset `start` on: no copy of them.
    if header_length is None:
        header, start = body, len(body)
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgument(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        header, start = body[:header_length], header_length
    try:
        document = json_body.loads(header)
    except orjson.JSONDecodeError as exc:
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InternalError("Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InternalError("Unable to parse 'id': attempt to access JSON non-string as string")
    raw_parameters = document.get("parameters")
    parameters = {} if raw_parameters is None else _parameters(raw_parameters, "request")
    if not isinstance(parameters.get("binary_data_output", False), bool):
        raise InternalError(
            "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean"
        )
    inputs: list[InferTensor] = []
    request = InferRequest(model_name, model_version, inputs, None, request_id, parameters)
    if parameters:
        if not _CONTROLS.isdisjoint(parameters):
            _take_controls(request)
        if any(key.startswith("triton_") for key in parameters):
            # the server's own keys (final-response flags...); a client setting them would steer it
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                "specified."
            )
    if "inputs" not in document:
        raise InternalError("Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")
    raw_inputs = document["inputs"]
    if not isinstance(raw_inputs, list):
        raise InternalError("Unable to parse 'inputs': attempt to access JSON non-array as array")
    end = len(body)
    offset = start
    data_errors: list[InputDataError] = []
    for raw in raw_inputs:
        tensor, used = _decode_input(raw, body, offset, end, model_name, request_id, data_errors)
        offset += used
        inputs.append(tensor)
    if offset != end:
        raise InvalidArgument(f"unexpected additional input data for model '{model_name}'")
    if data_errors:
        raise data_errors[-1]  # the last input's, as Triton reports it
    raw_outputs = document.get("outputs")
    if raw_outputs is not None:
        request.outputs = _decode_outputs(raw_outputs)
    return request


def decode_raw_binary_request(
    body: bytes, model_name: str, model_version: str, input_name: str, datatype: str, shape: tuple[int, ...]
) -> InferRequest:
    """The header-less form: the whole body is the one input of the model (batch 1)."""
    if datatype == "BYTES" and math.prod(shape) == 1:  # the whole body (Triton adds the length prefix itself)
        data = np.array([bytes(body)], dtype=object).reshape(shape)
    else:
        # Triton calls the tensor 'raw_input' in errors until it is matched to the model's input.
        data = tensor_from_bytes(
            memoryview(body), datatype, shape, "raw_input", model_name, request_prefix("")
        )
    tensor = InferTensor(input_name, datatype, shape, data)
    return InferRequest(model_name, model_version, [tensor], None, "", {"binary_data_output": True})


_CONTROLS = frozenset(("sequence_id", "sequence_start", "sequence_end", "priority", "timeout"))


def _take_controls(request: InferRequest) -> None:
    """Move the reserved parameters into the request's control fields, checked here, once: `sequence_id`
    is a string or a uint64 and the flags are booleans (with Triton's texts); a `priority` or `timeout`
    that is not a uint64 is refused, as Triton refuses it."""
    parameters = request.parameters
    sequence_id = parameters.pop("sequence_id", 0)
    if not isinstance(sequence_id, str) and (
        not isinstance(sequence_id, int) or isinstance(sequence_id, bool) or not 0 <= sequence_id < 1 << 64
    ):
        raise InternalError("Unable to parse 'sequence_id': attempt to access JSON non-string as string")
    if isinstance(sequence_id, str):
        check_sequence_id(sequence_id)
    request.sequence_id = sequence_id
    for key, flag in (("sequence_start", SEQUENCE_START), ("sequence_end", SEQUENCE_END)):
        value = parameters.pop(key, False)
        if not isinstance(value, bool):
            raise InternalError(f"Unable to parse '{key}': attempt to access JSON non-boolean as boolean")
        if value:
            request.flags |= flag
    request.priority = _unsigned(parameters.pop("priority", 0), "priority")
    request.timeout_us = _unsigned(parameters.pop("timeout", 0), "timeout")


def _unsigned(value: Any, key: str) -> int:
    """A parameter Triton reads as a uint64 (`priority`, `timeout`), with its text for anything else."""
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise InternalError(
            f"Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    return value


def _parameters(value: Any, kind: str, name: str | None = None) -> dict[str, Any]:
    """A 'parameters' object, checked; `kind` and `name` say whose it is (in an error only)."""
    if value is None:
        return {}
    if type(value) is not dict:  # what orjson parses an object into
        where = kind if name is None else f"{kind} '{name}'"
        raise InternalError(f"failed to get {where} params: 'parameters' must be a JSON object")
    for item in value.values():
        if item is None or type(item) is list or type(item) is dict:
            key = next(k for k, v in value.items() if v is item)
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )
    return value


_ONE_SOURCE = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
    "'shared_memory_region' in 'parameters'. But "
)


def _member(raw: dict[str, Any], key: str, kind: type, kind_text: str) -> Any:
    value = raw.get(key)
    if type(value) is not kind:
        if key not in raw:
            raise InternalError(
                f"Unable to parse '{key}': attempt to access non-existing object member '{key}'"
            )
        raise InternalError(f"Unable to parse '{key}': attempt to access JSON non-{kind_text} as {kind_text}")
    return value


def _decode_input(
    raw: Any,
    body: bytes,
    offset: int,
    end: int,
    model_name: str,
    request_id: str,
    data_errors: list[InputDataError],
) -> tuple[InferTensor, int]:
    """One element of 'inputs', and how many bytes of binary data it takes from `body` at `offset`
    (binary data ends at `end`). Binary data that does not fit the shape goes to `data_errors`."""
    if type(raw) is not dict:
        raise InvalidArgument(f"{_ONE_SOURCE}no field is set (each element of 'inputs' must be an object)")
    name = raw.get("name")
    datatype = raw.get("datatype")
    dims = raw.get("shape")
    # one test for the common case; the helper finds which member is wrong, in Triton's order
    if type(name) is not str or type(datatype) is not str or type(dims) is not list:
        name = _member(raw, "name", str, "string")
        datatype = _member(raw, "datatype", str, "string")
        dims = _member(raw, "shape", list, "array")
    shape = tuple(dims)
    count = _element_count(shape, name, datatype)
    raw_parameters = raw.get("parameters")
    parameters = {} if raw_parameters is None else _parameters(raw_parameters, "input", name)
    if datatype not in WIRE_DATATYPES:
        raise InvalidArgument(f"invalid datatype for input {name}")
    size = parameters.get("binary_data_size")
    has_data = "data" in raw
    in_shm = "shared_memory_region" in parameters
    if has_data + (size is not None) + in_shm != 1:
        named = [
            n
            for n, on in (
                ("'data'", has_data),
                ("'binary_data_size'", size is not None),
                ("'shared_memory_region'", in_shm),
            )
            if on
        ]
        raise InvalidArgument(_ONE_SOURCE + ("set " + " ".join(named) if named else "no field is set"))
    if in_shm:
        # resolved by the engine, which owns the registered regions
        ref = _shared_memory_ref(parameters)
        return InferTensor(name, datatype, shape, _NO_DATA, parameters, ref), 0
    if size is None:
        return InferTensor(
            name, datatype, shape, _from_json(raw["data"], datatype, shape, count, name), parameters
        ), 0
    if type(size) is not int or size < 0:
        raise InternalError(
            "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    if offset + size > end:
        raise InvalidArgument(
            f"unexpected size for input '{name}', expecting {offset + size - end} additional bytes "
            f"for model '{model_name}'"
        )
    dtype = _FIXED_SIZE.get(datatype)
    if dtype is not None and size and size == count * dtype.itemsize and type(body) is bytes:
        # the common case in one step: an array over the body itself, shaped (half the cost of
        # frombuffer on a slice, then reshape)
        return InferTensor(name, datatype, shape, np.ndarray(shape, dtype, body, offset), parameters), size
    try:
        data = tensor_from_bytes(
            memoryview(body)[offset : offset + size],
            datatype,
            shape,
            name,
            model_name,
            request_prefix(request_id),
        )
    except InputDataError as exc:
        data_errors.append(exc)
        data = _NO_DATA
    return InferTensor(name, datatype, shape, data, parameters), size


def _element_count(shape: tuple[Any, ...], name: str, datatype: str) -> int:
    """The shape's element count; refuses non-integers, counts and byte sizes past int64 (Triton's texts),
    and what numpy could not allocate."""
    count = 1
    bound = 1
    for d in shape:
        if type(d) is not int or d < 0:
            raise InternalError(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
        count *= d
        bound *= d or 1
    if len(shape) > MAX_RANK or bound > MAX_ELEMENTS:
        if count > _INT64_MAX:
            raise InvalidArgument(
                f"invalid shape for input '{name}': shape {_shape_text(shape)} causes total element count to "
                f"exceed maximum size of {_INT64_MAX}"
            )
        size = element_size(datatype) if datatype in WIRE_DATATYPES and datatype != "BYTES" else 1
        if size > 1 and count > _INT64_MAX // size:
            raise InvalidArgument(
                f"byte size overflow for input '{name}': element count ({count}) * data type size ({size}) "
                f"exceeds maximum allowed size ({_INT64_MAX})"
            )
        raise shape_too_large(shape, name)
    return count


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _nesting_depth(data: list[Any]) -> int:
    """How many arrays deep the first element lies (the others lie as deep, or the shape check fails)."""
    depth = 0
    while type(data) is list:
        depth += 1
        if depth >= _MAX_JSON_NESTING or not data:
            break
        data = data[0]
    return depth


def _from_json(data: Any, datatype: str, shape: tuple[int, ...], count: int, name: str) -> np.ndarray:
    if datatype in ("FP16", "BF16"):
        raise InvalidArgument(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for "
            f"input {name}"
        )
    if not isinstance(data, list):
        raise InternalError("Unable to parse 'data': attempt to access JSON non-array as array")
    if data and type(data[0]) is list and _nesting_depth(data) >= _MAX_JSON_NESTING:
        raise InvalidArgument(
            f"JSON nesting depth exceeds maximum allowed limit ({_MAX_JSON_NESTING}) (input '{name}')"
        )
    if datatype == "BYTES":
        return _bytes_from_json(data, shape, count, name)
    try:
        parsed = np.array(data)
    except (ValueError, TypeError):
        raise InternalError(
            f"Unable to parse 'data': Shape does not match true shape of 'data' field (input '{name}' has "
            "ragged nested arrays)"
        ) from None
    if parsed.size != count:
        raise _count_error(name, count, parsed.size)
    dtype = numpy_dtype(datatype)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    kind = parsed.dtype.kind
    if datatype == "BOOL":
        if kind != "b":
            raise _type_error(datatype)
    elif dtype.kind in "iu":
        if kind not in _INT_KINDS:
            # numpy infers float64 (or object) when UINT64 values above INT64's range meet others
            return _wide_ints(data, datatype, shape, name)
        if parsed.dtype != dtype:
            low, high = _INT_BOUNDS[dtype]
            # Python's min/max beat two numpy reductions on the small flat lists JSON requests carry.
            small = parsed.ndim == 1 and count <= 256
            if (min(data) if small else parsed.min()) < low or (max(data) if small else parsed.max()) > high:
                raise InvalidArgument(f"input '{name}': a value is out of range for {datatype}")
    elif kind not in _FLOAT_KINDS:
        raise _type_error(datatype)
    return parsed.astype(dtype, copy=False).reshape(shape)


def _wide_ints(data: list[Any], datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    flat = _flatten(data)
    if not all(type(x) is int for x in flat):
        raise _type_error(datatype)
    try:
        return np.array(flat, dtype=numpy_dtype(datatype)).reshape(shape)
    except OverflowError:
        raise InvalidArgument(f"input '{name}': a value is out of range for {datatype}") from None


def _bytes_from_json(data: list[Any], shape: tuple[int, ...], count: int, name: str) -> np.ndarray:
    flat = _flatten(data)
    if len(flat) != count:
        raise _count_error(name, count, len(flat))
    array = np.empty(count, dtype=np.object_)
    for i, item in enumerate(flat):
        if not isinstance(item, str):
            raise InternalError(
                f"Unable to parse JSON bytes array: attempt to access JSON non-string as string "
                f"(input '{name}' has {item!r})"
            )
        array[i] = item.encode("utf-8")
    return array.reshape(shape)


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


def _count_error(name: str, expected: int, got: int) -> InternalError:
    """Data that does not fill its shape, in Triton's words, the whole of which its test scripts compare:
    too few elements in its later releases' words, too many in 2.51's."""
    if got < expected:
        return InternalError("Failed to parse 'data' field: shape does not match true shape")
    return InternalError("Unable to parse 'data': Shape does not match true shape of 'data' field")


def _type_error(datatype: str) -> InternalError:
    """An element of the wrong JSON type, in the words of Triton's JSON reader for the wanted type."""
    return InternalError(f"Unable to parse 'data': attempt to access JSON {_WANTED[datatype[:2]]}")


# what Triton's JSON reader says when an element is not of the kind a datatype reads, by datatype prefix
_WANTED = {
    "BO": "non-boolean as boolean",
    "IN": "non-signed-integer as signed-integer",
    "UI": "non-unsigned-integer as unsigned-integer",
    "FP": "non-number as double",
}


_NO_DATA = np.empty(0, dtype=np.uint8)  # placeholder until the engine reads the shared memory region


def _shared_memory_ref(parameters: dict[str, Any]) -> SharedMemoryRef:
    region = parameters["shared_memory_region"]
    offset = parameters.get("shared_memory_offset", 0)
    size = parameters.get("shared_memory_byte_size", 0)
    if not isinstance(region, str):
        raise InternalError(
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"
        )
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", size)):
        if type(value) is not int or value < 0:
            raise InternalError(
                f"Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
    return SharedMemoryRef(region, offset, size)


def _decode_outputs(raw: Any) -> list[RequestedOutput] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InternalError("Unable to parse 'outputs': attempt to access JSON non-array as array")
    outputs: list[RequestedOutput] = []
    for item in raw:
        if not isinstance(item, dict):
            raise InternalError("Unable to parse 'outputs': each requested output must be a JSON object")
        name = _member(item, "name", str, "string")
        parameters = _parameters(item.get("parameters"), "output", name)
        shared_memory = None
        if "shared_memory_region" in parameters:
            if parameters.get("binary_data") is True:
                raise InvalidArgument("Output can't set both 'shared_memory_region' and 'binary_data'")
            shared_memory = _shared_memory_ref(parameters)
        binary = parameters.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise InternalError(
                "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean"
            )
        count = parameters.get("classification", 0)
        if type(count) is not int or count < 0:
            raise InternalError(
                "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
        outputs.append(RequestedOutput(name, binary, count, parameters, shared_memory))
    return outputs


def encode_infer_response(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """The response body and, when binary tensors follow the JSON, the JSON header's length."""
    # `binary_data_output` only applies when the request lists no outputs; a listed output is JSON
    # unless it asks for binary itself (as Triton does).
    requested = request.outputs
    if requested:
        default_binary = False
        binary_by_name = {o.name: o.binary for o in requested}
    else:
        default_binary = request.parameters.get("binary_data_output", False) is True
        binary_by_name = _NONE_BY_NAME
    outputs: list[Any] = []
    blobs: list[bytes] = [b""]  # the header goes first
    for tensor in response.outputs:
        binary = binary_by_name.get(tensor.name)
        if binary is None:
            binary = default_binary
        if binary and tensor.shared_memory is None:
            data, datatype, shape = tensor.data, tensor.datatype, tensor.shape
            # an array of its datatype's dtype (nearly always) gives its row-major bytes directly
            blob = (
                data.tobytes() if data.dtype == _FIXED_SIZE.get(datatype) else tensor_to_bytes(data, datatype)
            )
            blobs.append(blob)
            key = (tensor.name, datatype, shape if type(shape) is tuple else tuple(shape), len(blob))
            outputs.append(_BINARY_ENTRIES.get(key) or _binary_entry(key))
            continue
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.shared_memory is None:  # else already written into the client's region
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    document: dict[str, Any] = {"id": response.id} if response.id else {}
    document["model_name"] = response.model_name
    document["model_version"] = response.model_version
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = orjson.dumps(document, option=_JSON_OPTIONS)
    if len(blobs) == 1:
        return header, None
    blobs[0] = header
    return b"".join(blobs), len(header)


_NONE_BY_NAME: dict[str, bool | None] = {}
# The JSON of a binary output's entry, by name, datatype, shape and size: the same few recur from
# response to response, and orjson copies a Fragment as it is instead of serializing a dict again.
_BINARY_ENTRIES: dict[tuple[str, str, tuple[int, ...], int], orjson.Fragment] = {}
_MAX_BINARY_ENTRIES = 1024


def _binary_entry(key: tuple[str, str, tuple[int, ...], int]) -> orjson.Fragment:
    if len(_BINARY_ENTRIES) >= _MAX_BINARY_ENTRIES:  # shapes that vary without end
        _BINARY_ENTRIES.clear()
    name, datatype, shape, size = key
    entry = {
        "name": name,
        "datatype": datatype,
        "shape": list(shape),
        "parameters": {"binary_data_size": size},
    }
    fragment = _BINARY_ENTRIES[key] = orjson.Fragment(orjson.dumps(entry, option=_JSON_OPTIONS))
    return fragment


def _json_data(tensor: InferTensor) -> Any:
    flat = tensor.data.reshape(-1)
    if tensor.datatype == "BYTES":
        try:
            return [_text(item) for item in flat]
        except UnicodeDecodeError:
            # JSON strings are UTF-8: Triton refuses these too rather than alter them
            raise InvalidArgument(
                f"output '{tensor.name}' holds bytes that are not valid UTF-8, which JSON cannot carry: "
                "request it as binary data"
            ) from None
    if tensor.datatype in ("FP16", "BF16"):
        return flat.astype(np.float32)
    return np.ascontiguousarray(flat)


def _text(item: Any) -> str:
    if isinstance(item, bytes):
        return item.decode("utf-8")
    return str(item)


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
