"""The one way an inference request, unary or streamed, goes through a model version.

An `Admission` counts the request in flight from the moment it is admitted until it is released (so that
a reload or unload retires the version only once its requests are answered), checks it against the
model's config, builds the request the backend sees, shapes the outputs, and records the request in the
model's statistics once. Requests refused by the checks never reach the model and, as in Triton, count
in no statistic. A response cache and tracing (a traced request's REQUEST_START, QUEUE_START and
REQUEST_END, and its tensors) hook in here, once, for every frontend.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from nereid.backends.base import BackendRequest, Outputs
from nereid.backends.responses import ResponseStream
from nereid.cache import CacheKey, cache_key
from nereid.classification import classify
from nereid.core.request_checks import checked_request, inputs_batch_size
from nereid.datatypes import tensor_from_bytes, tensor_to_bytes, wire_datatype
from nereid.errors import (
    InputDataError,
    InvalidArgument,
    NereidError,
    QueueFull,
    QueueTimeout,
    request_prefix,
)
from nereid.repository.model import ModelVersion
from nereid.shared_memory import SharedMemoryRef, SharedMemoryRegistry, check_outputs_fit
from nereid.statistics import RequestTiming
from nereid.types import InferRequest, InferTensor, RequestedOutput

log = logging.getLogger(__name__)


def _log_request(admission: Admission, outcome: str) -> None:
    """--log-verbose: one line per request, with its model, version, id, outcome and time."""
    model = admission.model
    log.debug(
        "request for model '%s' version %s, id '%s': %s in %.3f ms",
        model.name,
        model.version_text,
        admission.request.id,
        outcome,
        (time.perf_counter_ns() - admission.start) / 1e6,
    )


class Admission(RequestTiming):
    """One checked request to one model version, in flight from construction until it ends: by `finish`,
    `failed` or `cached` (unary requests), or by `release` (streamed ones), each of which records what it
    must and then ends it in one way (`_end`).

    Construction counts the request in flight, holds the shared-memory regions it names (as in Triton: an
    unregister meanwhile only marks them, and they go once their last request ends) and checks it
    (ending it again when a check fails). A streamed request (`stream` given) cannot use shared memory;
    `shared_memory` is the registry that a unary request's regions are looked up in.

    An admission is its request's RequestTiming too, the one its scheduler fills in: one object per
    request rather than two."""

    __slots__ = (
        "model",
        "request",
        "start",
        "queued",
        "wanted",
        "backend",
        "trace",
        "_regions",
        "_shared_memory",
        "_held",
    )
    __eq__ = object.__eq__  # an admission is itself, whatever its times: not a dataclass's equality
    __hash__ = object.__hash__

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        shared_memory: SharedMemoryRegistry | None = None,
        stream: ResponseStream | None = None,
    ) -> None:
        self.start = time.perf_counter_ns()
        self.model = model
        self.request = request
        self.queue_ns = self.infer_ns = 0  # RequestTiming's, for the scheduler to fill in
        self.batched = False
        self._shared_memory = shared_memory
        self._regions: dict[str, SharedMemoryRef] | None = None
        self._held: tuple[str, ...] = ()
        self.trace = trace = request.trace
        model.inflight += 1
        try:
            layout = request.layout
            if shared_memory is not None and layout is None:  # a layout has no shared memory
                held = request.shared_memory_regions()
                if held:
                    self._held = shared_memory.acquire(held)
            if layout is None or layout not in model.checked_layouts:  # a checked layout: no shared memory
                self._checked(request, shared_memory, stream)
            inputs, self.wanted, names = checked_request(model, request)
            if request.outputs and shared_memory is not None and layout is None:
                regions = {o.name: o.shared_memory for o in self.wanted if o.shared_memory is not None}
                if regions:
                    check_outputs_fit(shared_memory, regions)
                    self._regions = regions
            # the request as backends see it; the HTTP frontend's own parameter is not the model's
            parameters = request.parameters
            if "binary_data_output" in parameters:
                parameters = {k: v for k, v in parameters.items() if k != "binary_data_output"}
            self.backend = backend = BackendRequest(
                inputs,
                names,
                request.id,
                parameters,
                request.sequence_id,
                request.flags,
                request.timeout_us,
                request.priority,
                stream,
                None,
                layout,
            )
            self.queued = time.perf_counter_ns()
            if trace is not None:
                trace.admitted(model.name, model.version, request.id, self.start, self.queued, request.inputs)
                backend.trace = trace
        except BaseException as exc:
            self.trace = None  # refused: it never reaches the model, and its trace is not begun
            self._end(f"refused: {exc}")
            raise

    def _checked(
        self, request: InferRequest, shared_memory: SharedMemoryRegistry | None, stream: ResponseStream | None
    ) -> None:
        """Where the request's tensors are: a streamed request's never in shared memory; a unary request's
        inputs read from the shared memory that holds them."""
        if stream is not None:
            if any(t.shared_memory is not None for t in request.inputs) or any(
                o.shared_memory is not None for o in request.outputs or ()
            ):
                raise InvalidArgument(
                    f"model '{self.model.name}' is decoupled: its inputs and outputs cannot be in shared memory"
                )
        elif shared_memory is not None and request.layout is None:  # a layout has no shared memory
            for tensor in request.inputs:
                if tensor.shared_memory is not None:
                    _read_shared_memory_inputs(shared_memory, self.model, request)
                    break

    def failed(self, exc: BaseException) -> None:
        """The scheduler raised for a unary request: record why, and release it."""
        model = self.model
        if isinstance(exc, NereidError) and exc.answered and not model.ensemble:
            end = self._record_success(time.perf_counter_ns())  # the model's own error response
            self._end(f"answered with an error: {exc}", (), end)
            return
        reason = "REJECTED"
        if model.ensemble:  # Triton gives an ensemble's failures no finer reason
            reason = "CANCELED" if isinstance(exc, asyncio.CancelledError) else "OTHER"
            model.statistics.record_failure(time.perf_counter_ns() - self.start, reason)
        elif not isinstance(exc, QueueFull):  # refused before it was queued: Triton counts it nowhere
            reason = _failure_reason(exc)
            model.statistics.record_failure(time.perf_counter_ns() - self.start, reason)
        self._end(f"failed ({reason}): {exc}")

    def finish(self, results: Outputs) -> list[InferTensor]:
        """The scheduler answered a unary request: its response tensors; record it, and release it."""
        executed = time.perf_counter_ns()
        try:
            outputs = self.outputs(results)
        except BaseException as exc:
            self.failed(exc)
            raise
        self._end("OK", outputs, self._record_success(executed))
        return outputs

    def _end(self, outcome: str | None, outputs: list[InferTensor] | tuple[()] = (), end: int = 0) -> None:
        """The one ending of a request: its trace ended (with its outputs), its shared-memory regions let
        go, and the version told it has one request less in flight."""
        if self.trace is not None:
            self.trace.request_end(outputs, end)
        held = self._held
        if held:
            self._held = ()
            self._shared_memory.release(held)  # type: ignore[union-attr]  # held only with a registry
        self.model.request_done()
        if outcome is not None and log.isEnabledFor(logging.DEBUG):
            _log_request(self, outcome)

    def _record_success(self, executed: int) -> int:
        """A request the model answered, its outputs shaped from `executed` on; returns when it ended."""
        model = self.model
        start = self.start
        end = time.perf_counter_ns()
        if self.batched:  # the batcher recorded the execution it shared with other requests
            model.statistics.record_batched_request(end - start, self, self.queued - start, end - executed)
        else:  # an execution of its own
            model.statistics.record_request(
                inputs_batch_size(model, self.request),
                end - start,
                self,
                self.queued - start,
                end - executed,
            )
        if model.statistics.first_response is not None:
            model.statistics.record_first_response(end - start)
        return end

    def cache_key(self) -> CacheKey:
        """What identifies this request's response in the response cache: model, version, every input
        (after shared memory was read) and the outputs asked for."""
        inputs = {t.name: (t.datatype, t.data) for t in self.request.inputs}
        wanted = [(o.name, o.class_count) for o in self.wanted]
        return cache_key(self.model.name, self.model.version_text, inputs, wanted)

    def cached(self, outputs: list[InferTensor], lookup_start: int, lookup_ns: int) -> list[InferTensor]:
        """The response cache answered: its tensors, written into the client's shared memory where it
        asked; record a success that ran no execution (Triton's rule), and release the request."""
        try:
            if self._regions:
                self._write_regions(outputs)
        except BaseException as exc:
            self.failed(exc)
            raise
        start = self.start
        statistics = self.model.statistics
        statistics.record_cache_hit(time.perf_counter_ns() - start, lookup_start - self.queued, lookup_ns)
        statistics.record_first_response(time.perf_counter_ns() - start)
        self._end("OK (from the response cache)", outputs)
        return outputs

    def outputs(self, results: Outputs) -> list[InferTensor]:
        """The response tensors of one result, written into the client's shared memory where it asked. A
        model may leave out a requested output (Python models can): Triton omits it too."""
        model = self.model
        outputs: list[InferTensor] = []
        for requested in self.wanted:
            name = requested.name
            if name not in results:
                continue
            outputs.append(_output_tensor(model, requested, results[name]))
        if self._regions:
            self._write_regions(outputs)
        return outputs

    def _write_regions(self, outputs: list[InferTensor]) -> None:
        regions = self._regions
        registry = self._shared_memory
        if regions is None or registry is None:
            return
        for tensor in outputs:
            if tensor.name in regions:
                tensor.shared_memory = regions[tensor.name]
                registry.write(
                    tensor.shared_memory, tensor.name, tensor_to_bytes(tensor.data, tensor.datatype)
                )

    def record_streamed(self) -> None:
        """A streamed request ended with its final response (queue and output times are not measured)."""
        self.model.statistics.record_request(
            inputs_batch_size(self.model, self.request),
            time.perf_counter_ns() - self.start,
            self,
            0,
            0,
        )
        if log.isEnabledFor(logging.DEBUG):
            _log_request(self, "OK (streamed)")

    def record_stream_failed(self, exc: BaseException) -> None:
        """A streamed request ended with an error that failed the whole request (an ensemble's step)."""
        reason = _failure_reason(exc)
        if self.model.ensemble and reason != "CANCELED":  # no finer reason for ensembles, as in `failed`
            reason = "OTHER"
        self.model.statistics.record_failure(time.perf_counter_ns() - self.start, reason)
        if log.isEnabledFor(logging.DEBUG):
            _log_request(self, f"failed (streamed): {exc}")

    def responded(self) -> None:
        """A streamed request's first response (or error) went out."""
        self.model.statistics.record_first_response(time.perf_counter_ns() - self.start)

    def record_cancelled(self) -> None:
        self.model.statistics.record_failure(time.perf_counter_ns() - self.start, "CANCELED")
        if log.isEnabledFor(logging.DEBUG):
            _log_request(self, "cancelled")

    def release(self) -> None:
        """A streamed request is answered (its outcome recorded by `record_*`): it ends."""
        self._end(None)  # its outcome was logged as it was recorded


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELED"
    return "REJECTED" if isinstance(exc, QueueTimeout) else "BACKEND"


def _read_shared_memory_inputs(
    registry: SharedMemoryRegistry, model: ModelVersion, request: InferRequest
) -> None:
    data_error: InputDataError | None = None  # the last input's, as Triton reports it
    for tensor in request.inputs:
        if tensor.shared_memory is not None:
            view = registry.view(tensor.shared_memory)
            try:
                tensor.data = tensor_from_bytes(
                    view, tensor.datatype, tensor.shape, tensor.name, model.name, request_prefix(request.id)
                )
            except InputDataError as exc:
                data_error = exc
    if data_error is not None:
        raise data_error


def _output_tensor(model: ModelVersion, requested: RequestedOutput, array: np.ndarray) -> InferTensor:
    spec = model.outputs[requested.name]
    if spec.backend_dims is not None:
        array = array.reshape(((array.shape[0],) if model.max_batch_size > 0 else ()) + spec.dims)
    if requested.class_count > 0:
        array = classify(array, requested.class_count, spec.labels, model.max_batch_size > 0, requested.name)
        return InferTensor(requested.name, "BYTES", array.shape, array)
    if array.dtype != spec.numpy_dtype:
        # Triton answers with the data type the model produced, whatever the configuration says.
        return InferTensor(requested.name, wire_datatype(array.dtype), array.shape, array)
    return InferTensor(requested.name, spec.datatype, array.shape, array)
