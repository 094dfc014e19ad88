"""A unary request to a dynamic batcher or the default scheduler answered by callback: no coroutine and no
Task per request.

`Engine.infer` awaits the scheduler's future through several coroutines, each resumed when the execution
is done; for a model that takes microseconds that is a good share of a request's CPU. Here the request is
admitted and queued at once, and the scheduler calls it back when its execution is done (no future, no
callback scheduled per request): that finishes it (statistics, tracing, release) and hands the response
on. A request whose tensors are in shared memory holds its regions from admission until its outputs are
written. What may wait for something else (the response cache, decoupled models, sequence batching,
ensembles) keeps the awaited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from nereid.admission import Admission
from nereid.backends.base import BackendRequest, BackendResult
from nereid.repository.model import ModelVersion
from nereid.shared_memory import SharedMemoryRegistry
from nereid.statistics import RequestTiming
from nereid.types import InferRequest, InferResponse, InferTensor

Answer = Callable[[InferResponse | BaseException], None]
Done = Callable[[BackendResult], None]


class _Entry(Protocol):
    done: Done | None  # None once answered, or once its caller withdrew it


class CallbackScheduler(Protocol):
    """A scheduler that takes a request with a callback (DynamicBatcher, DefaultScheduler)."""

    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> _Entry: ...

    def withdraw(self, entry: Any) -> None: ...


class QueuedSchedulerInfer(Admission):
    """The QueuedInfer of a request handed to a scheduler with a callback: the request's admission itself
    (one object per request rather than two), queued at once."""

    __slots__ = ("_scheduler", "_entry", "_answer", "_early")

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        shared_memory: SharedMemoryRegistry | None,
        scheduler: CallbackScheduler,
    ) -> None:
        Admission.__init__(self, model, request, shared_memory)  # counted in flight, checked
        self._scheduler = scheduler
        self._answer: Answer | None = None
        self._early: InferResponse | BaseException | None = None
        # The entry refers back to this object (as its timing): kept only while the request is unanswered,
        # so that no cycle is left for the garbage collector.
        self._entry: _Entry | None = None
        try:
            entry = scheduler.enqueue(self.backend, self, self._resolved)
        except BaseException as exc:
            self.failed(exc)
            raise
        if entry.done is not None:  # not answered inside enqueue (as a model run on the event loop is)
            self._entry = entry

    def then(self, callback: Answer) -> None:
        early = self._early
        if early is None:
            self._answer = callback
        else:  # a model run on the event loop answered inside enqueue
            self._early = None
            callback(early)

    def cancel(self) -> None:
        entry = self._entry
        if entry is None or entry.done is None:  # answered already
            self._early = None
            return
        self._scheduler.withdraw(entry)
        self._answer = self._entry = None
        self.failed(asyncio.CancelledError())

    def _resolved(self, result: BackendResult) -> None:
        answer = self._answer
        self._answer = self._entry = None  # which refer back to this object: no cycle left for the collector
        value: InferResponse | BaseException
        if isinstance(result, BaseException):
            self.failed(result)
            value = result
        else:
            try:
                outputs = self.finish(result)  # which records a failure itself
            except Exception as exc:
                value = exc
            else:
                model = self.model
                # a plain dict of outputs has no parameters: no getattr for it
                if model.ensemble or (type(result) is not dict and getattr(result, "parameters", None)):
                    value = infer_response(model, self.request, outputs, getattr(result, "parameters", None))
                else:  # the usual response, as `infer_response` would make it without the call (parameters given)
                    value = InferResponse(model.name, model.version_text, outputs, self.request.id, {})
        if answer is not None:
            answer(value)
        else:  # `then` comes next (a withdrawn request is never answered)
            self._early = value


class QueuedSharedMemoryInfer(QueuedSchedulerInfer):
    """A queued request whose tensors are in shared memory: its regions held from admission until its
    outputs are written into them (or it is withdrawn), as `Engine.infer` holds them; an unregister
    meanwhile only marks them."""

    __slots__ = ("_registry", "_held")

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        shared_memory: SharedMemoryRegistry,
        scheduler: CallbackScheduler,
        regions: list[str],
    ) -> None:
        self._registry = shared_memory
        self._held = shared_memory.acquire(regions)
        try:
            QueuedSchedulerInfer.__init__(self, model, request, shared_memory, scheduler)
        except BaseException:
            self._release()
            raise

    def cancel(self) -> None:
        QueuedSchedulerInfer.cancel(self)  # withdrawn now, or answered before (and released then)
        self._release()

    def _resolved(self, result: BackendResult) -> None:
        try:
            QueuedSchedulerInfer._resolved(self, result)
        finally:
            self._release()

    def _release(self) -> None:
        held, self._held = self._held, ()
        if held:
            self._registry.release(held)


def infer_response(
    model: ModelVersion,
    request: InferRequest,
    outputs: list[InferTensor],
    parameters: dict[str, Any] | None = None,
) -> InferResponse:
    if model.ensemble:  # Triton echoes the sequence controls in an ensemble's response
        return InferResponse(
            model.name, model.version_text, outputs, request.id, request.sequence_parameters()
        )
    if parameters:  # the backend's own response parameters
        return InferResponse(model.name, model.version_text, outputs, request.id, parameters)
    return InferResponse(model.name, model.version_text, outputs, request.id)
