"""A unary request to any model answered by callback: the one way a unary request reaches a scheduler.

The request is admitted and handed to its scheduler's `enqueue` at once, and the scheduler calls it back
when its execution is done (no future, no Task, no coroutine per request on the default scheduler and the
dynamic batcher): that ends it (statistics, tracing, its shared memory let go) and hands the response on.
`Engine.infer` awaits the same object (`answer_of`); a model with a response cache looks the request up
first (`QueuedCachedInfer`). Decoupled models stream instead (nereid.core.streaming).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from nereid.cache import ResponseCache
from nereid.core.admission import Admission
from nereid.repository.model import ModelVersion
from nereid.scheduling.base import Result, Submits, outputs_of, resolve
from nereid.shared_memory import SharedMemoryRegistry
from nereid.types import InferRequest, InferResponse, InferTensor

Answer = Callable[[InferResponse | BaseException], None]


class QueuedSchedulerInfer(Admission):
    """The QueuedInfer of a request handed to its scheduler: the request's admission itself (one object per
    request rather than two), queued at once."""

    __slots__ = ("_scheduler", "_entry", "_answer", "_early")

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        shared_memory: SharedMemoryRegistry | None,
        scheduler: Submits,
    ) -> None:
        Admission.__init__(
            self, model, request, shared_memory
        )  # counted in flight, its regions held, checked
        self._scheduler = scheduler
        self._answer: Answer | None = None
        self._early: InferResponse | BaseException | None = None
        # The entry refers back to this object (as its timing): kept only while the request is unanswered,
        # so that no cycle is left for the garbage collector.
        self._entry: Any = None
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

    def _resolved(self, result: Result) -> None:
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
            else:  # a plain dict of outputs has no parameters: no getattr for it
                parameters = None if type(result) is dict else getattr(result, "parameters", None)
                value = infer_response(self.model, self.request, outputs, parameters)
        if answer is not None:
            answer(value)
        else:  # `then` comes next (a withdrawn request is never answered)
            self._early = value


class QueuedCachedInfer(Admission):
    """The QueuedInfer of a request to a model with a response cache: looked up first (the cache may be
    remote, so this runs as a Task); a miss goes to the scheduler and its response into the cache."""

    __slots__ = ("_task",)

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        shared_memory: SharedMemoryRegistry | None,
        cache: ResponseCache,
    ) -> None:
        Admission.__init__(self, model, request, shared_memory)
        self._task = asyncio.ensure_future(self._answered(cache))

    def then(self, callback: Answer) -> None:
        self._task.add_done_callback(partial(_settled, callback))

    def cancel(self) -> None:
        self._task.cancel()

    async def _answered(self, cache: ResponseCache) -> InferResponse:
        model = self.model
        try:
            key = self.cache_key()
            lookup_start = time.perf_counter_ns()
            hit = await cache.lookup(key)
            lookup_ns = time.perf_counter_ns() - lookup_start
            if hit is None:
                results = await outputs_of(model.scheduler, self.backend, self)
        except BaseException as exc:
            self.failed(exc)
            raise
        if hit is not None:  # `cached` records its own failure
            return infer_response(model, self.request, self.cached(hit, lookup_start, lookup_ns))
        outputs = self.finish(results)
        insert_start = time.perf_counter_ns()
        await cache.insert(key, outputs)
        model.statistics.record_cache_miss(lookup_ns + time.perf_counter_ns() - insert_start)
        return infer_response(model, self.request, outputs, getattr(results, "parameters", None))


def _settled(callback: Answer, task: asyncio.Future[InferResponse]) -> None:
    if task.cancelled():
        return  # its caller went away
    error = task.exception()
    callback(task.result() if error is None else error)


async def answer_of(queued: QueuedSchedulerInfer | QueuedCachedInfer) -> InferResponse:
    """A queued request's response, awaited on one future; a cancelled caller cancels the request."""
    answered: asyncio.Future[InferResponse] = asyncio.get_running_loop().create_future()
    queued.then(partial(resolve, answered))
    try:
        return await answered
    except asyncio.CancelledError:
        queued.cancel()
        raise


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
