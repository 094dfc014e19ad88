"""EXECUTION_MODE thread: a model.py run inside the server process, on its instances' own threads.

Each instance is a blocking ModelInstance: the InstancePool runs its executions on the instance's thread
(never on the event loop: `runs_inline` is false). Requests reach `execute` as pb_utils objects around the
very numpy arrays the frontends decoded, and the model's output arrays go back to the codecs as they are:
no shared memory, no frames, no second process to wake. What pb_utils asks of the server goes through an
`InProcessHost` bound to the threads that run the model's code: BLS and model control become coroutines
submitted to the server's event loop (`run_coroutine_threadsafe`) that the model's thread waits for, and a
decoupled model's responses are put on their ResponseStream from whichever thread sends them.

The trade: no isolation. A crash in native model code takes the server down, a hang holds its instance
for good (no execute timeout can stop a thread), and Python code holds the GIL the frontends also need.
Models that are light, or that spend their time in native code releasing the GIL, gain; others should
keep the default, EXECUTION_MODE process.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import ModuleType, TracebackType
from typing import Any

import orjson

from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.python.bls import control, infer_request, run_bls
from nereid.backends.python.messages import instance_args, response_error
from nereid.backends.python.process import model_log
from nereid.backends.python.worker import pb_utils, wire
from nereid.backends.python.worker.errors import status_name
from nereid.backends.python.worker.stub import _check_responses as check_responses
from nereid.backends.python.worker.stub import describe, import_model
from nereid.backends.responses import ResponseStream
from nereid.core.engine_client import ModelServices
from nereid.custom_metrics import MetricError, MetricsScope
from nereid.errors import InternalError, NereidError, Unavailable
from nereid.types import InferResponse, InferTensor

log = logging.getLogger("nereid.backends.python")

IS_READY_TIMEOUT_S = 5.0
_module_ids = itertools.count(1)
_HERE = os.path.abspath(__file__)
# The server's event loop, for model code that calls the server from threads of its own.
_server_loop: asyncio.AbstractEventLoop | None = None


def install(server: ModelServices | None) -> None:
    """Make `import triton_python_backend_utils` find the module in the server process too."""
    sys.modules.setdefault("triton_python_backend_utils", pb_utils)
    if pb_utils._default_host is None:  # threads that model code starts itself
        pb_utils.set_default_host(InProcessHost("model code", "", server))


class InProcessHost:
    """pb_utils' way to the server for one model instance run in the server process."""

    def __init__(
        self, label: str, model_dir: str, server: ModelServices | None, metrics: MetricsScope | None = None
    ) -> None:
        self.label = label
        self.model_dir = model_dir
        self.server = server  # what BLS requests and model control go to
        self.metrics = metrics  # the instance's custom metric handles
        self._released: list[int] = []  # metric family handles to release (appended by finalizers)
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once a request came
        self.streams: dict[int, ResponseStream] = {}  # a decoupled model's open requests
        self._stream_ids = itertools.count(1)

    def log(self, level: int, text: str) -> None:
        model_log(level, text, self.label)

    # custom metrics: run in the registry at once (its lock is held for microseconds)
    def metric(self, operation: str, args: tuple[Any, ...]) -> Any:
        self.flush_releases()
        if self.metrics is None:
            raise pb_utils.TritonModelException("custom metrics are made by model code that the server runs")
        try:
            return self.metrics.call(operation, args)
        except MetricError as exc:
            raise pb_utils.TritonModelException(str(exc)) from None
        except (TypeError, ValueError) as exc:
            raise pb_utils.TritonModelException(f"Invalid metric operation: {exc}") from None

    def release_family(self, handle: int) -> None:
        self._released.append(handle)  # not now: a finalizer may run while this thread holds the registry

    def flush_releases(self) -> None:
        released = self._released
        if released and self.metrics is not None:
            handles = []
            while released:
                handles.append(released.pop())
            self.metrics.call("family_delete", handles)

    # BLS and model control: coroutines on the server's loop, waited for on the model's thread
    def _server_loop(self) -> asyncio.AbstractEventLoop:
        loop = self.loop or _server_loop
        if loop is None or loop.is_closed():
            raise pb_utils.TritonModelException(
                "this call needs the server, and its event loop is not running"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # model code never runs on the server's loop; waiting there would hang it
            raise pb_utils.TritonModelException("model code cannot wait for the server on its event loop")
        return loop

    def exec(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> Iterator[pb_utils.InferenceResponse]:
        loop = self._server_loop()
        answers: queue.SimpleQueue[tuple[bool, pb_utils.InferenceResponse]] = queue.SimpleQueue()
        asyncio.run_coroutine_threadsafe(
            run_bls(
                self.server,
                _infer_request(request),
                decoupled,
                lambda f, r: answers.put((f, _response(r))),
                request._trace._handle,
            ),
            loop,
        )
        return _until_final(answers.get)

    async def async_exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        loop = self._server_loop()
        mine = asyncio.get_running_loop()  # the instance's private loop, running `async def execute`
        answers: asyncio.Queue[tuple[bool, pb_utils.InferenceResponse]] = asyncio.Queue()

        def answer(final: bool, result: InferResponse | NereidError | None) -> None:
            mine.call_soon_threadsafe(answers.put_nowait, (final, _response(result)))

        asyncio.run_coroutine_threadsafe(
            run_bls(self.server, _infer_request(request), decoupled, answer, request._trace._handle), loop
        )
        if decoupled:
            return _async_until_final(answers)
        return (await answers.get())[1]

    def control(self, action: str, model_name: str, argument: Any) -> Any:
        loop = self._server_loop()
        future = asyncio.run_coroutine_threadsafe(control(self.server, action, model_name, argument), loop)
        try:
            return future.result()
        except NereidError as exc:
            raise pb_utils.TritonModelException(exc.message) from None

    # decoupled responses, from any thread
    def open_stream(self, stream: ResponseStream) -> int:
        stream_id = next(self._stream_ids)
        self.streams[stream_id] = stream
        return stream_id

    def respond(
        self, stream_id: int, response: pb_utils.InferenceResponse | None, final: bool, wanted: frozenset[str]
    ) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            raise pb_utils.TritonModelException("Unable to send response: the request is no longer open.")
        result = None
        if response is not None:
            problem = _tensors_problem(response)
            if problem:
                raise pb_utils.TritonModelException(problem)
            result = _result(response, wanted)
        if final:
            self.streams.pop(stream_id, None)
        try:
            stream.loop.call_soon_threadsafe(stream.put, result, final)
        except RuntimeError:  # the server's loop closed: nobody reads the stream any more
            pass

    def is_cancelled(self, stream_id: int) -> bool:
        stream = self.streams.get(stream_id)
        return stream is None or stream.cancelled


class ThreadInstance:
    """ModelInstance for a model.py run in the server process; see the module docstring."""

    runs_inline = False  # model code may take long or wait for the server: never on the event loop

    def __init__(self, spec: InstanceSpec, config_json: str) -> None:
        install(spec.server)
        self._name = spec.instance_name
        self._label = f"model '{spec.model_name}' instance '{spec.instance_name}'"
        self._metrics = spec.custom_metrics.scope() if spec.custom_metrics is not None else None
        self._host = InProcessHost(self._label, str(spec.version_dir), spec.server, self._metrics)
        self._decoupled = spec.config.model_transaction_policy.decoupled
        self._lock = threading.Lock()  # model code runs one call at a time, as in a worker
        self._loop: asyncio.AbstractEventLoop | None = None  # for `async def` methods of the model
        self._closed = False
        self._module = _import(spec.model_file)
        args = instance_args(spec, config_json)
        try:
            self._model = self._call(self._module.TritonPythonModel)
            if hasattr(self._model, "initialize"):
                self._call(self._model.initialize, args)
        except BaseException as exc:
            self._forget_module()
            if self._metrics is not None:
                self._metrics.close()
            raise Unavailable(
                f"failed to load model '{spec.model_name}': {describe(_trimmed(exc))}".rstrip()
            ) from None

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop, which serves BLS and model control calls (the pool tells)."""
        global _server_loop
        self._host.loop = _server_loop = loop

    # ModelInstance
    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        host = self._host
        tensor_type = pb_utils.Tensor
        new = object.__new__
        datatypes = _DATATYPES
        request_type = pb_utils.InferenceRequest
        batch = []
        opened = []
        for request in requests:
            tensors = []
            for name, array in request.inputs.items():
                tensor = new(tensor_type)  # Tensor._wrap, without its calls
                tensor._name = name
                tensor._datatype = datatypes.get(array.dtype) or _datatype(array)
                if not array.flags.aligned:
                    # A binary input read in place from its request's body may start at any offset. numpy
                    # computes on a misaligned array two to seven times slower than on an aligned one, and
                    # copying it costs less than one ufunc over it (a worker's arena is aligned too).
                    array = array.copy()
                tensor._array = array
                tensors.append(tensor)
            # InferenceRequest._received with request_fields' values, without their calls
            pb_request = new(request_type)
            pb_request._inputs = tensors
            pb_request._request_id = request.id
            pb_request._correlation_id = request.correlation_id
            pb_request._flags = request.flags
            parameters = request.parameters
            pb_request._parameters = orjson.dumps(parameters).decode() if parameters else "{}"
            pb_request._timeout = request.timeout_us
            pb_request._output_names = request.outputs
            if request.stream is not None:
                pb_request._stream_id = stream_id = host.open_stream(request.stream)
                opened.append(stream_id)
            if request.trace is not None:  # made into the model's InferenceTrace if it asks (`trace()`)
                pb_request._traced = request.trace
            pb_request._host = host
            batch.append(pb_request)
        try:
            responses = self._call(self._model.execute, batch)
        except BaseException as exc:
            self._close_streams(opened)  # the failure ends them (streaming puts the error)
            raise self._failed(describe(_trimmed(exc))) from None
        if self._decoupled:
            if responses is not None:
                self._close_streams(opened)
                raise self._failed(
                    "Python model is using the decoupled mode and the execute function must return None, "
                    f"returned {type(responses).__name__}"
                )
            return [{} for _ in requests]
        if responses is None:  # it may have sent them instead
            responses = pb_utils.sent_responses(batch)
        problem = check_responses(responses, len(requests))
        if problem:
            raise self._failed(problem)
        return [
            _result(response, request.outputs) for request, response in zip(requests, responses, strict=True)
        ]

    async def model_ready(self) -> bool:
        """The model's `is_ready`, run on a thread of its own once the running execution is done."""
        if not hasattr(self._model, "is_ready") or self._closed:
            return not self._closed
        try:
            return bool(
                await asyncio.wait_for(
                    asyncio.to_thread(self._call, self._model.is_ready), IS_READY_TIMEOUT_S
                )
            )
        except asyncio.TimeoutError:
            log.warning("%s: is_ready did not answer within %.0f s", self._label, IS_READY_TIMEOUT_S)
        except Exception as exc:
            log.error("%s: is_ready raised: %s", self._label, describe(_trimmed(exc)))
        return False

    def close(self) -> None:
        """Finalize the model (the pool has stopped its executions) and end its open streams. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if hasattr(self._model, "finalize"):
            try:
                self._call(self._model.finalize)
            except BaseException as exc:
                log.error("%s: finalize failed: %s", self._label, describe(_trimmed(exc)))
        if self._loop is not None:
            self._loop.close()
        streams, self._host.streams = self._host.streams, {}
        error = Unavailable(f"{self._label} was unloaded before answering")
        for stream in streams.values():
            try:
                stream.loop.call_soon_threadsafe(stream.put, error, True)
            except RuntimeError:
                pass
        if self._metrics is not None:
            self._metrics.close()  # its families leave the metrics endpoint with it
        self._forget_module()

    # running model code
    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        """Call model code with this instance's host bound to the thread; awaitables (async def methods)
        run to completion on the instance's own event loop."""
        with self._lock:
            previous = pb_utils.bind_thread(self._host)
            try:
                value = method(*args)
                if type(value) is list or not hasattr(value, "__await__"):
                    return value
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                return self._loop.run_until_complete(value)
            finally:
                pb_utils.bind_thread(previous)
                self._host.flush_releases()

    def _close_streams(self, stream_ids: list[int]) -> None:
        for stream_id in stream_ids:
            self._host.streams.pop(stream_id, None)

    def _failed(self, message: str) -> InternalError:
        text = f"Failed to process the request(s) for model '{self._name}', message: {message}"
        log.error("%s", text)
        return InternalError(text)

    def _forget_module(self) -> None:
        sys.modules.pop(self._module.__name__, None)


def _import(model_file: Any) -> ModuleType:
    """model.py as a module of its own: every instance imports it under a unique name (as each worker
    would import it afresh), so that models' files of the same name never meet in sys.modules."""
    path = os.path.abspath(model_file)
    try:
        return import_model(path, f"_nereid_python_model_{next(_module_ids)}")
    except BaseException as exc:
        raise Unavailable(f"failed to load '{path}': {describe(_trimmed(exc))}".rstrip()) from None


def _trimmed(exc: BaseException) -> BaseException:
    """The exception without this module's frames, so that its traceback shows the model's alone."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _HERE:
        tb = tb.tb_next
    return exc.with_traceback(tb)


_DATATYPES = {dtype: name for name, dtype in wire.NUMPY_TYPES.items()}


def _datatype(array: Any) -> str:
    return _DATATYPES.get(array.dtype) or wire.datatype_of(array.dtype) or "BYTES"


def _tensors_problem(response: pb_utils.InferenceResponse) -> str:
    """What is wrong with a response's tensors (`check_responses` asks it of execute's), or ""; a
    response with an error sends no tensors."""
    if response._error is None:
        for tensor in response._tensors:
            if not isinstance(tensor, pb_utils.Tensor):
                return f"output_tensors must hold pb_utils.Tensor objects, found {type(tensor)!r}"
    return ""


def _result(response: pb_utils.InferenceResponse, wanted: Sequence[str] | frozenset[str]) -> BackendResult:
    """A model's response as the engine takes it, its tensors checked: the output arrays themselves, or
    the response's error."""
    error = response._error
    if error is not None:
        return response_error(status_name(error.code()), str(error.message()))
    outputs: Outputs = {}
    for tensor in response._tensors:
        if tensor._name in wanted or not wanted:
            array = tensor._array
            if tensor._datatype == "BYTES" and not _of_bytes(array):
                # np.bytes_ arrays, or str elements: bytes objects, as a worker's answer would have them
                array = wire.deserialize_bytes(wire.serialize_bytes(array)).reshape(array.shape)
            outputs[tensor._name] = array
    return outputs


def _of_bytes(array: Any) -> bool:
    return array.dtype.kind == "O" and all(type(item) is bytes for item in array.flat)


def _infer_request(request: pb_utils.InferenceRequest) -> Any:
    tensors = [InferTensor(t._name, t._datatype, tuple(t._array.shape), t._array) for t in request._inputs]
    return infer_request(
        request.model_name,
        int(request.model_version),
        tensors,
        request._request_id,
        request._correlation_id,
        request._flags,
        request._parameters,
        request._timeout,
        request._output_names,
    )


_STATUS_CODES = {status_name(code): code for code in range(8)}


def _response(result: InferResponse | NereidError | None) -> pb_utils.InferenceResponse:
    """What the engine answered a BLS request, as model code reads it."""
    if result is None:
        return pb_utils.InferenceResponse()
    if isinstance(result, NereidError):
        code = _STATUS_CODES.get(result.status.value, pb_utils.TritonError.INTERNAL)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(result.message, code))
    wrap = pb_utils.Tensor._wrap
    parameters = orjson.dumps(result.parameters).decode() if result.parameters else "{}"
    return pb_utils.InferenceResponse(
        [wrap(t.name, t.datatype, t.data) for t in result.outputs], parameters=parameters
    )


def _until_final(
    get: Callable[[], tuple[bool, pb_utils.InferenceResponse]],
) -> Iterator[pb_utils.InferenceResponse]:
    """The responses up to the final one (which may be empty: the final flag alone), as in a worker."""
    final = False
    while not final:
        final, response = get()
        yield response


async def _async_until_final(
    answers: asyncio.Queue[tuple[bool, pb_utils.InferenceResponse]],
) -> AsyncIterator[pb_utils.InferenceResponse]:
    final = False
    while not final:
        final, response = await answers.get()
        yield response
