"""Triton's `triton_python_backend_utils`, as model code imports it inside a worker process.

The worker registers this module under that name. It covers the public API of Triton's module (tensors,
requests, responses, errors, logging, the auto-complete helper and the type helpers), response senders
for decoupled models, and BLS: `InferenceRequest.exec` / `async_exec` and model control, which the
server runs through its engine (the target model's own scheduler) while model code waits.

Everything that reaches the server goes through a `Host` (BLS, model control, decoupled responses,
cancellation, logging, the model folder). In a worker process that is `ChannelHost`, over the socket. A
model run in the server process itself (EXECUTION_MODE thread) shares this one module with every other
such model, so its host is bound to the threads that run its code (`bind_thread`); threads that model
code starts itself fall back to the process-wide host, and response senders keep the host they were
made under.
"""

from __future__ import annotations

import json
import struct  # noqa: F401 (Triton's module has it; models use pb_utils.struct)
import sys
import threading
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from . import dlpack, wire
from .auto_complete import ModelConfig
from .channel import Channel, ServerGone
from .errors import TritonError, TritonModelException, not_yet, status_name
from .metrics import Metric, MetricFamily

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


class Host(Protocol):
    """What model code reaches through this module: the server, the log, and the model's folder."""

    model_dir: str

    def log(self, level: int, text: str) -> None: ...

    def exec(self, request: InferenceRequest, decoupled: bool) -> Iterator[InferenceResponse]:
        """The responses to a BLS request, as they come (the last one final)."""
        ...

    async def async_exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        """A BLS request's response, or with `decoupled` an async iterator over its responses."""
        ...

    def control(self, action: str, model_name: str, argument: Any) -> Any:
        """load, unload or ready; raises TritonModelException when the server refuses."""
        ...

    def respond(
        self, stream_id: int, response: InferenceResponse | None, final: bool, wanted: frozenset[str]
    ) -> None:
        """A decoupled model's response to the request `stream_id` (None: the final flag alone)."""
        ...

    def is_cancelled(self, stream_id: int) -> bool: ...

    def metric(self, operation: str, args: tuple[Any, ...]) -> Any:
        """A custom metric operation, run by the server (see metrics.py)."""
        ...

    def release_family(self, handle: int) -> None: ...

    def flush_releases(self) -> None:
        """Send the releases of garbage-collected metric families."""
        ...


_default_host: Host | None = None  # the worker's, or the server process's for threads of model code
_bound = threading.local()  # .host: the host of the model whose code runs on this thread


def _configure(log_sink: Callable[[int, str], None], model_dir: str, channel: Channel | None = None) -> None:
    """The worker's host: this process serves one model."""
    global _default_host
    _default_host = ChannelHost(log_sink, model_dir, channel)


def set_default_host(host: Host | None) -> None:
    global _default_host
    _default_host = host


def bind_thread(host: Host | None) -> Host | None:
    """Route this thread's calls to `host` (the model it runs code of); returns the previous binding."""
    previous = getattr(_bound, "host", None)
    _bound.host = host
    return previous


def _host() -> Host | None:
    return getattr(_bound, "host", None) or _default_host


def _server() -> Host:
    host = _host()
    if host is None:
        raise TritonModelException("this call needs the server, and no model is served on this thread")
    return host


def get_model_dir() -> str:
    """The folder of the model version being served (where model.py is)."""
    host = _host()
    return "" if host is None else host.model_dir


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
    """A named tensor: an input of a request, or an output of a response. Its data is in host memory (one made
    from a GPU tensor by `from_dlpack` keeps that tensor too)."""

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
        return self._exported().__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._exported().__dlpack__(**kwargs)  # a stream is for device tensors: none here

    def _exported(self) -> np.ndarray:
        """The array DLPack exports. An unversioned capsule cannot mark memory read-only, so numpy will not
        export a read-only array (an input read in place from its request's body) through one: such an
        array is copied, once, and the tensor keeps the copy."""
        array = self._array
        if not array.flags.writeable:
            array = self._array = array.copy()
        return array

    def __dlpack_device__(self) -> tuple:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor from any DLPack producer or capsule. One on a GPU keeps the GPU tensor for `to_dlpack`
        and takes a host copy for the response or BLS request that carries it."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if dlpack.is_capsule(tensor):
            device = dlpack.capsule_device(tensor)
            if device is not None and device[0] == dlpack.CUDA:
                tensor = dlpack.import_capsule(name, tensor)
            else:
                tensor = _DLPackCapsule(tensor)
        elif not hasattr(tensor, "__dlpack__") or not hasattr(tensor, "__dlpack_device__"):
            raise TritonModelException(
                f"tensor '{name}': a DLPack capsule or an object with __dlpack__ and __dlpack_device__ is needed, "
                f"got {type(tensor).__name__}"
            )
        if tensor.__dlpack_device__()[0] != dlpack.CUDA:
            array = np.from_dlpack(tensor)
            if not array.flags.c_contiguous:
                raise TritonModelException(f"tensor '{name}': DLPack tensors must be C-contiguous")
            return Tensor(name, array)
        on_gpu = _GpuTensor(name, dlpack.host_copy(name, tensor))
        on_gpu._device = tensor
        return on_gpu

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


class _GpuTensor(Tensor):
    """A tensor a model made on a GPU: the GPU tensor for DLPack consumers, its host copy in `_array` for
    the response or BLS request (Nereid's tensors travel in host memory)."""

    __slots__ = ("_device",)
    _device: Any  # the producer's GPU tensor (torch, CuPy, JAX, ...)

    def as_numpy(self) -> np.ndarray:
        raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")

    def is_cpu(self) -> bool:
        return False

    def to_dlpack(self) -> Any:
        return self._device.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._device.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple:
        return tuple(self._device.__dlpack_device__())


# -- requests and responses ----------------------------------------------------------------------------


class PreferredMemory:
    """Where BLS outputs should be placed (kept for compatibility; outputs are always in host memory)."""

    def __init__(self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """The request's trace, when it is traced: a BLS request given `trace=request.trace()` is traced as
    the request's child. `get_context()` is its OpenTelemetry context (JSON with `traceparent`), or None."""

    def __init__(self, trace_id: int = 0, context: str | None = None, handle: Any = None) -> None:
        self._id = trace_id
        self._context = context
        self._handle = handle  # the server's own trace object, for models run in the server process

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        return self._context


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
        # Triton's binding takes bytes for a str too: models pass names read from BYTES tensors as they are
        self.model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
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
        stream_id: int = 0,
        traced: int | tuple[int, str | None] | None = None,
    ) -> InferenceRequest:
        # One per request on the hot path: set what varies, the rest are class-level defaults.
        request = cls.__new__(cls)
        request._stream_id = stream_id
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._output_names = output_names
        request._flags = flags
        request._timeout = timeout
        request._parameters = parameters
        if traced is not None:  # its trace's id and context: the trace is made if the model asks for it
            request._traced = traced
        return request

    # Defaults of received requests (instances override what they set).
    _trace = InferenceTrace()
    # what the request's trace is made of if the model asks for it: a trace id, or one and its context (sent
    # to a worker), or the server's own trace (a model run in the server process)
    _traced: Any = None
    _release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
    model_name = ""
    model_version = -1
    preferred_memory = PreferredMemory()
    _stream_id = 0  # a decoupled model's request: where its responses go
    _sender: InferenceResponseSender | _KeptResponse | None = None
    _host: Host | None = None  # set on requests of a model run in the server process

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
        traced = self._traced
        if traced is not None:
            if type(traced) is int:
                self._trace = InferenceTrace(traced)
            elif type(traced) is tuple:
                self._trace = InferenceTrace(*traced)
            else:  # the server's own trace: a model run in the server process
                self._trace = InferenceTrace(traced.id, traced.context(), traced)
            self._traced = None
        return self._trace

    def is_cancelled(self) -> bool:
        """Whether the client went away (decoupled models hear of it; other requests run to the end)."""
        return bool(self._stream_id) and (self._host or _server()).is_cancelled(self._stream_id)

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise not_yet("rescheduling requests (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)")
        self._release_flags = flags

    def get_response_sender(self) -> InferenceResponseSender | _KeptResponse:
        if not self._stream_id:  # a model that is not decoupled: its one response, kept for execute's return
            if self._sender is None:
                self._sender = _KeptResponse()
            return self._sender
        if self._sender is None:
            self._sender = InferenceResponseSender(self._stream_id, self._output_names, self._host)
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on the server (BLS) and wait: its response, or with `decoupled` an iterator
        over its responses. Errors come back in the response (`has_error()`)."""
        self._check_bls()
        responses = _server().exec(self, decoupled)
        if decoupled:
            return responses
        try:
            return next(responses)
        finally:
            close = getattr(responses, "close", None)
            if close is not None:
                close()

    async def async_exec(self, decoupled: bool = False) -> Any:
        """`exec` that lets other coroutines run while the server answers."""
        self._check_bls()
        return await _server().async_exec(self, decoupled)

    def _check_bls(self) -> None:
        if not self.model_name:
            raise TritonModelException("a BLS request needs a model_name")
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(f"inputs must be pb_utils.Tensor objects, found {type(tensor)!r}")

    def _bls_frame(self, decoupled: bool) -> Callable[[int], tuple]:
        inputs = [wire.inline_tensor(t._name, t._datatype, t._array) for t in self._inputs]
        request = (
            self._request_id,
            self._correlation_id,
            self._flags,
            self._parameters,
            self._timeout,
            tuple(self._output_names),
            tuple(inputs),
            self.trace()._id,  # 0: not traced
        )
        version = int(self.model_version)
        return lambda call_id: (wire.BLS, call_id, self.model_name, version, decoupled, request)


class InferenceResponse:
    """The answer to one request: output tensors, or an error."""

    __slots__ = ("_tensors", "_error", "_parameters")

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Any = None,
    ) -> None:
        # One per request in most models: the usual case (a list of tensors, nothing else) checked first.
        if type(output_tensors) is list:
            self._tensors = output_tensors.copy()
        elif output_tensors is None:
            self._tensors = []
        elif isinstance(output_tensors, (list, tuple)):
            self._tensors = list(output_tensors)
        else:
            raise TritonModelException(
                f"output_tensors must be a list of Tensor, got {type(output_tensors).__name__}"
            )
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(f"error must be a TritonError, got {type(error).__name__}")
        self._error = error
        self._parameters = "{}" if parameters is None else _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceResponseSender:
    """Sends a decoupled model's responses to one request, from execute or from any thread, any time."""

    def __init__(self, stream_id: int, output_names: Sequence[str], host: Host | None = None) -> None:
        self._stream_id = stream_id
        self._output_names = frozenset(output_names)
        self._closed = False
        self._host = host or _server()  # kept: the sender may be used from any thread

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("Inference Response object is needed when the flag is not final")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"send takes an InferenceResponse, not {type(response).__name__}")
        self._host.respond(self._stream_id, response, final, self._output_names)
        if final:
            self._closed = True

    def is_cancelled(self) -> bool:
        return self._host.is_cancelled(self._stream_id)


class _KeptResponse:
    """The response sender of a model that is not decoupled: the one response it may send, with the final
    flag, from execute; it stands for execute returning it, when execute returns None."""

    def __init__(self) -> None:
        self.response: InferenceResponse | None = None
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"send takes an InferenceResponse, not {type(response).__name__}")
        if response is not None:
            if self.response is not None:
                raise TritonModelException("a model that is not decoupled sends one response per request")
            self.response = response
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._closed = True

    def is_cancelled(self) -> bool:
        return False


def sent_responses(requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
    """The responses a model that is not decoupled sent through its response senders, one per request,
    or None unless every request has one (execute then had to return them)."""
    responses = []
    for request in requests:
        sender = request._sender
        if not isinstance(sender, _KeptResponse) or sender.response is None:
            return None
        responses.append(sender.response)
    return responses


def _response_result(response: InferenceResponse, wanted: frozenset[str]) -> tuple[Any, ...]:
    if not isinstance(response, InferenceResponse):
        raise TritonModelException(f"send takes an InferenceResponse, not {type(response).__name__}")
    error = response._error
    if error is not None:
        return (False, status_name(error.code()), str(error.message()))
    tensors = []
    for tensor in response._tensors:
        if not isinstance(tensor, Tensor):
            raise TritonModelException(
                f"output_tensors must hold pb_utils.Tensor objects, found {type(tensor)!r}"
            )
        if not wanted or tensor._name in wanted:
            tensors.append(wire.inline_tensor(tensor._name, tensor._datatype, tensor._array))
    return (True, tuple(tensors), response._parameters)


_ERROR_CODES = {status_name(code): code for code in range(8)}


def _received_response(result: tuple[Any, ...] | None) -> InferenceResponse:
    """A BLS response as the server sent it (None: the final flag alone, an empty response)."""
    if result is None:
        return InferenceResponse()
    if not result[0]:
        _, status, message = result
        return InferenceResponse(error=TritonError(message, _ERROR_CODES.get(status, TritonError.INTERNAL)))
    tensors = [
        Tensor._wrap(name, dt, wire.inline_array(dt, shape, data)) for name, dt, shape, data in result[1]
    ]
    return InferenceResponse(tensors, parameters=result[2])


class _BlsResponses:
    """The responses to one BLS request, in order, up to the final one."""

    def __init__(self, channel: Channel, call: Any) -> None:
        self._channel = channel
        self._call = call
        self._done = False

    def __iter__(self) -> _BlsResponses:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        try:
            frame = self._channel.next_frame(self._call)
        except ServerGone as exc:
            self.close()
            return InferenceResponse(error=TritonError(str(exc), TritonError.UNAVAILABLE))
        assert frame is not None  # waited without a deadline
        _, _, final, result = frame
        if final:
            self.close()
            if result is None:
                return InferenceResponse()
        return _received_response(result)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._channel.finish(self._call)


class _AsyncBlsResponses:
    """`async for` over a decoupled BLS call's responses."""

    def __init__(self, responses: _BlsResponses) -> None:
        self._responses = responses

    def __aiter__(self) -> _AsyncBlsResponses:
        return self

    async def __anext__(self) -> InferenceResponse:
        import asyncio

        def step() -> InferenceResponse | None:
            try:
                return next(self._responses)
            except StopIteration:
                return None

        response = await asyncio.get_running_loop().run_in_executor(None, step)
        if response is None:
            raise StopAsyncIteration
        return response


class ChannelHost:
    """The host of a worker process: the server at the other end of the socket."""

    def __init__(self, log_sink: Callable[[int, str], None], model_dir: str, channel: Channel | None) -> None:
        self.log = log_sink
        self.model_dir = model_dir
        self._channel = channel
        self._released: list[int] = []  # metric family handles to release (appended by finalizers)

    def _server(self) -> Channel:
        if self._channel is None:
            raise TritonModelException(
                "this call needs the server, and the model is not served (auto-complete)"
            )
        return self._channel

    def exec(self, request: InferenceRequest, decoupled: bool) -> _BlsResponses:
        channel = self._server()
        return _BlsResponses(channel, channel.start(request._bls_frame(decoupled)))

    async def async_exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        import asyncio

        responses = self.exec(request, decoupled)
        if decoupled:
            return _AsyncBlsResponses(responses)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, next, responses)
        finally:
            responses.close()

    def control(self, action: str, model_name: str, argument: Any) -> Any:
        return self._ask(lambda call_id: (wire.CONTROL, call_id, action, model_name, argument))

    def _ask(self, message: Callable[[int], tuple]) -> Any:
        """Send `message(call_id)` and wait for its CONTROL_DONE answer: the value, or the refusal raised."""
        channel = self._server()
        call = channel.start(message)
        try:
            frame = channel.next_frame(call)
        except ServerGone as exc:
            raise TritonModelException(str(exc)) from None
        finally:
            channel.finish(call)
        assert frame is not None
        _, _, ok, value = frame
        if not ok:
            raise TritonModelException(value)
        return value

    def respond(
        self, stream_id: int, response: InferenceResponse | None, final: bool, wanted: frozenset[str]
    ) -> None:
        result = None if response is None else _response_result(response, wanted)
        channel = self._server()
        if final:
            channel.cancelled.discard(stream_id)
        channel.send((wire.RESPONSE, stream_id, final, result))

    def is_cancelled(self, stream_id: int) -> bool:
        return self._server().is_cancelled(stream_id)

    def metric(self, operation: str, args: tuple[Any, ...]) -> Any:
        self.flush_releases()
        return self._ask(lambda call_id: (wire.METRIC, call_id, operation, args))

    def release_family(self, handle: int) -> None:
        self._released.append(handle)

    def flush_releases(self) -> None:
        released = self._released
        if not released or self._channel is None or self._channel.closed:
            return
        handles = []
        while released:
            handles.append(released.pop())
        self._channel.send((wire.METRIC, 0, "family_delete", tuple(handles)))


def _flush_releases() -> None:
    """Between frames: release the metric families model code dropped."""
    host = _default_host
    if host is not None:
        host.flush_releases()


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    try:  # called on every request by most models: our own requests and tensors, read directly
        for tensor in inference_request._inputs:
            if tensor._name == name:
                return tensor
    except AttributeError:  # a stand-in for them, as a model's own tests may pass
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
    host = _host()
    if host is not None:
        host.log(level, text)
    else:
        print(text, file=sys.stderr)


# -- model control from Python -------------------------------------------------------------------------


def _control(action: str, model_name: str, argument: Any = None) -> Any:
    return _server().control(action, model_name, argument)


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model, as the repository API's load does; needs --model-control-mode=explicit."""
    _control("load", model_name, (config, dict(files or {})))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    _control("unload", model_name, unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(_control("ready", model_name, str(model_version)))


# The public API, as model code knows it from Triton's module.
__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]
