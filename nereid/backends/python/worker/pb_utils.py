"""Triton's `triton_python_backend_utils`, as model code imports it inside a worker process.

The worker registers this module under that name. It covers the public API of Triton's module (tensors,
requests, responses, errors, logging, the auto-complete helper and the type helpers). BLS (`exec`,
`async_exec`, model loading) and response senders for decoupled models are not available yet: calling
them raises TritonModelException saying so.
"""

from __future__ import annotations

import json
import struct  # noqa: F401 (Triton's module has it; models use pb_utils.struct)
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import wire

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# The config's data type enum (TYPE_BOOL = 1 ... TYPE_STRING = 13, TYPE_BF16 = 14) and wire names.
_TYPE_NUMBERS = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}
_NUMBER_TYPES = {number: name for name, number in _TYPE_NUMBERS.items()}

# Set by the worker: where Logger messages go, and the model version folder.
_log_sink: Callable[[int, str], None] | None = None
_model_dir = ""


def _configure(log_sink: Callable[[int, str], None], model_dir: str) -> None:
    global _log_sink, _model_dir
    _log_sink = log_sink
    _model_dir = model_dir


def get_model_dir() -> str:
    """The folder of the model version being served (where model.py is)."""
    return _model_dir


# -- type helpers ------------------------------------------------------------------------------------


def triton_to_numpy_type(data_type: int) -> Any:
    name = _NUMBER_TYPES.get(data_type)
    if name is None or name == "BF16":
        return None
    return np.bool_ if name == "BOOL" else wire.NUMPY_TYPES[name].type


def numpy_to_triton_type(data_type: Any) -> int | None:
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "U":
        return None
    name = wire.datatype_of(dtype)
    return None if name is None else _TYPE_NUMBERS[name]


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray | None:
    """A BYTES tensor as one flat uint8 array of 4-byte-length-prefixed elements (None when empty)."""
    if input_tensor.size == 0:
        return None
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize a tensor that is not of bytes (object or np.bytes_)")
    return np.frombuffer(wire.serialize_bytes(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes."""
    return wire.deserialize_bytes(encoded_tensor)


# -- errors --------------------------------------------------------------------------------------------


class TritonError:
    """An error to return in an InferenceResponse; `code` picks the status the client gets."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


_STATUS_NAMES = {
    TritonError.UNKNOWN: "UNKNOWN",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARG",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}


def status_name(code: Any) -> str:
    return _STATUS_NAMES.get(int(code), "INTERNAL") if isinstance(code, int) else "INTERNAL"


class TritonModelException(Exception):
    """Raised by this module when model code uses it wrongly (and by BLS calls that fail)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self._message = message

    def message(self) -> str:
        return self._message


def _not_yet(what: str) -> TritonModelException:
    return TritonModelException(f"{what} is not supported by Nereid yet")


# -- tensors -------------------------------------------------------------------------------------------


# The usual dtypes, looked up directly (numpy dtypes hash and compare by value).
_DATATYPES = {dtype: name for name, dtype in wire.NUMPY_TYPES.items()}


class _DLPackCapsule:
    """Wraps a bare DLPack capsule so numpy can import it (numpy wants an object with __dlpack__)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple:
        return (1, 0)  # kDLCPU


class Tensor:
    """A named tensor: an input of a request, or an output of a response. Data lives in host memory."""

    __slots__ = ("_name", "_array", "_datatype")

    def __init__(self, name: str, numpy_array: np.ndarray) -> None:
        if not isinstance(numpy_array, np.ndarray):
            raise TritonModelException(
                f"tensor '{name}' must be built from a numpy array, got {type(numpy_array).__name__}"
            )
        datatype = _DATATYPES.get(numpy_array.dtype) or wire.datatype_of(numpy_array.dtype)
        if datatype is None:
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {numpy_array.dtype} is not supported (BYTES tensors are object "
                "arrays of bytes)"
            )
        self._name = name
        self._array = numpy_array
        self._datatype = datatype

    @classmethod
    def _wrap(cls, name: str, datatype: str, array: np.ndarray) -> Tensor:
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._datatype = datatype
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return _TYPE_NUMBERS[self._datatype]

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._array.__dlpack__()

    def __dlpack_device__(self) -> tuple:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        source = dlpack if hasattr(dlpack, "__dlpack__") else _DLPackCapsule(dlpack)
        array = np.from_dlpack(source)
        if not array.flags.c_contiguous:
            raise TritonModelException(f"tensor '{name}': DLPack tensors must be C-contiguous")
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


# -- requests and responses ----------------------------------------------------------------------------


class PreferredMemory:
    """Where BLS outputs should be placed (kept for compatibility; outputs are always in host memory)."""

    def __init__(self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """The request's trace; tracing is not available yet, so there is no context to propagate."""

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        return None


def _parameters_json(parameters: Any) -> str:
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        return parameters
    if not isinstance(parameters, dict):
        raise TritonModelException(f"parameters must be a dict, got {type(parameters).__name__}")
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"parameter '{key}': values must be bool, int or str, got {type(value).__name__}"
            )
    return json.dumps(parameters)


class InferenceRequest:
    """A request to the model: those execute receives, or one model code builds (for BLS, not yet)."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Iterable[str] | None = None,
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Any = None,
    ) -> None:
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._output_names: Sequence[str] = list(requested_output_names or [])
        self._flags = flags
        self._timeout = timeout
        self._parameters = _parameters_json(parameters)
        self._trace = trace or InferenceTrace()
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self.model_name = model_name
        self.model_version = model_version
        self.preferred_memory = preferred_memory or PreferredMemory()

    @classmethod
    def _received(
        cls,
        inputs: list[Tensor],
        request_id: str,
        correlation_id: int | str,
        flags: int,
        parameters: str,
        timeout: int,
        output_names: Sequence[str],
    ) -> InferenceRequest:
        # One per request on the hot path: set what varies, the rest are class-level defaults.
        request = cls.__new__(cls)
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._output_names = output_names
        request._flags = flags
        request._timeout = timeout
        request._parameters = parameters
        return request

    # Defaults of received requests (instances override what they set).
    _trace = InferenceTrace()
    _release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
    model_name = ""
    model_version = -1
    preferred_memory = PreferredMemory()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON object text, as Triton gives them."""
        return self._parameters

    def requested_output_names(self) -> list[str]:
        return list(self._output_names)

    def trace(self) -> InferenceTrace:
        return self._trace

    def is_cancelled(self) -> bool:
        return False

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise _not_yet("rescheduling requests (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)")
        self._release_flags = flags

    def get_response_sender(self) -> Any:
        raise _not_yet("sending responses with a response sender (decoupled models)")

    def exec(self, decoupled: bool = False) -> Any:
        raise _not_yet("BLS (InferenceRequest.exec)")

    async def async_exec(self, decoupled: bool = False) -> Any:
        raise _not_yet("BLS (InferenceRequest.async_exec)")


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    __slots__ = ("_tensors", "_error", "_parameters")

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Any = None,
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, (list, tuple)):
            raise TritonModelException(
                f"output_tensors must be a list of Tensor, got {type(output_tensors).__name__}"
            )
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(f"error must be a TritonError, got {type(error).__name__}")
        self._tensors = list(output_tensors)
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("input", []):
        if properties.get("name") == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("output", []):
        if properties.get("name") == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


# -- logging -------------------------------------------------------------------------------------------


class Logger:
    """Writes to the server's log, which shows the model file and line that logged."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    @staticmethod
    def log(message: str, level: int = INFO) -> None:
        _emit(level, message)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(Logger.INFO, message)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(Logger.WARNING, message)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(Logger.ERROR, message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(Logger.VERBOSE, message)


def _emit(level: int, message: str) -> None:
    frame = sys._getframe(2)
    text = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}] {message}"
    if _log_sink is not None:
        _log_sink(level, text)
    else:
        print(text, file=sys.stderr)


# -- custom metrics: accepted, not exported yet ----------------------------------------------------------


class Metric:
    """One labelled metric of a MetricFamily. Values are kept in the worker; the metrics endpoint that
    would export them does not exist yet."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        self._family = family
        self._labels = dict(labels)
        self._buckets = list(buckets or [])
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        self._value += value

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only gauges can be set")
        self._value = value

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only histograms observe values")
        self._value += value

    def value(self) -> float:
        return self._value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int = COUNTER) -> None:
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # noqa: N802
        return Metric(self, labels or {}, buckets)


# -- model control from Python: comes with BLS -------------------------------------------------------------


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    raise _not_yet("loading models from Python (load_model)")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise _not_yet("unloading models from Python (unload_model)")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise _not_yet("is_model_ready from Python")


# -- auto-complete ----------------------------------------------------------------------------------------


class ModelConfig:
    """The model configuration handed to `auto_complete_config`: read it with as_dict, add to it with the
    setters. Conflicts with what config.pbtxt already says raise ValueError and fail the load."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("input", [])
        config.setdefault("output", [])
        config.setdefault("max_batch_size", 0)
        self._model_config: dict[str, Any] = config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"auto_complete_config of model '{self._name()}' sets max_batch_size {max_batch_size}, below "
                f"the configured {configured}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"auto_complete_config of model '{self._name()}' asks for dynamic_batching, but the "
                    f"configuration already uses '{scheduler}'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 (Triton's parameter name)
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: Sequence[str]) -> None:
        model = self._name()
        label = f"{kind} '{tensor.get('name', '?')}' of auto_complete_config in model '{model}'"
        unknown = [key for key in tensor if key not in allowed]
        if unknown:
            raise ValueError(f"{label} has properties {unknown}; only {list(allowed)} are allowed")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} lacks the '{key}' property")
        for existing in self._model_config[kind]:
            if existing.get("name") != tensor["name"]:
                continue
            configured_type = existing.get("data_type", "TYPE_INVALID")
            if configured_type not in ("TYPE_INVALID", tensor["data_type"]):
                raise ValueError(
                    f"model '{model}': the configuration gives {kind} '{tensor['name']}' data type "
                    f"{configured_type}, auto_complete_config gives {tensor['data_type']}"
                )
            if existing.get("dims") and list(existing["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}': the configuration gives {kind} '{tensor['name']}' dims "
                    f"{list(existing['dims'])}, auto_complete_config gives {list(tensor['dims'])}"
                )
            if "optional" in existing and "optional" in tensor and existing["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{model}': the configuration makes {kind} '{tensor['name']}' optional "
                    f"{existing['optional']}, auto_complete_config says {tensor['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(dict(tensor))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        unknown = [key for key in transaction_policy_dict if key != "decoupled"]
        if unknown:
            raise ValueError(
                f"auto_complete_config of model '{self._name()}': the transaction policy may only set "
                f"'decoupled', not {unknown}"
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"auto_complete_config of model '{self._name()}' sets decoupled to {wanted}, but the "
                    f"configuration says {policy['decoupled']}"
                )
            policy["decoupled"] = wanted
