"""Triton's default scheduler: each request goes, FIFO, to the next free instance."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from nereid.backends.base import AsyncModelInstance, BackendRequest, BackendResult, ModelInstance, Outputs
from nereid.errors import InternalError, NereidError, Unavailable
from nereid.statistics import RequestTiming

log = logging.getLogger(__name__)

# A model whose executions take less than this on average runs on the event loop when an instance is
# idle and nothing is queued: handing it to a thread and back costs more CPU than running it.
INLINE_EXECUTION_LIMIT_S = 100e-6
_SMOOTHING = 0.1


@dataclass(frozen=True, slots=True)
class _Job:
    request: BackendRequest
    future: asyncio.Future[Outputs]
    loop: asyncio.AbstractEventLoop
    timing: RequestTiming | None
    queued_ns: int


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A request waiting for an AsyncModelInstance to have room."""

    request: BackendRequest
    future: asyncio.Future[Outputs]
    timing: RequestTiming | None
    queued_ns: int


class _Slot:
    """An instance and the lock that lets it run one execution at a time."""

    __slots__ = ("instance", "lock")

    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        self.lock = threading.Lock()


class DefaultScheduler:
    """One thread per instance pulls from a shared queue, so a free instance takes the oldest request.

    Backends such as ONNX Runtime release the GIL while they compute, so instances really run in parallel.
    Models that finish in microseconds run directly on the event loop while an instance is free and no
    request waits, since the hand-off to a thread would cost more than the execution itself.

    Instances whose model runs in another process (AsyncModelInstance: the Python backend) need no thread:
    the event loop submits to an idle one, else to one that can take another submission behind its current
    one, and a completion callback hands the instance the next waiting request.
    """

    def __init__(
        self,
        model_label: str,
        instances: Sequence[ModelInstance | AsyncModelInstance],
        inline_limit_s: float = INLINE_EXECUTION_LIMIT_S,
    ) -> None:
        self._label = model_label
        self._async_instances = [i for i in instances if isinstance(i, AsyncModelInstance)]
        self._outstanding = [0] * len(self._async_instances)  # submissions not finished, per instance
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._slots = [_Slot(i) for i in instances if not isinstance(i, AsyncModelInstance)]
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._inline_limit_s = inline_limit_s
        self._average_s: float | None = None  # smoothed execution time, None until measured
        self._threads = [
            threading.Thread(target=self._run, args=(slot,), name=f"{model_label}-instance-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for thread in self._threads:
            thread.start()

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        """The request's outputs; `timing`, when given, receives the queue and execution times."""
        if self._async_instances:
            answer: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
            index = self._pick()
            if index < 0:
                queued = time.perf_counter_ns() if timing is not None else 0
                self._waiting.append(_Waiting(request, answer, timing, queued))
            else:
                self._submit(index, request, answer, timing, 0)
            # A cancelled caller leaves the instance running the request; the result is then dropped.
            return await answer
        if self._average_s is not None and self._average_s < self._inline_limit_s and self._queue.empty():
            for slot in self._slots:
                if slot.lock.acquire(blocking=False):
                    try:
                        result = self._timed(slot.instance, request, timing)
                    except NereidError:
                        raise
                    except Exception as exc:
                        raise self._unexpected(exc) from exc
                    finally:
                        slot.lock.release()
                    if isinstance(result, NereidError):
                        raise result
                    return result
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outputs] = loop.create_future()
        self._queue.put(_Job(request, future, loop, timing, time.perf_counter_ns()))
        # If the caller is cancelled, the future is cancelled too and the worker skips or drops the job.
        return await future

    def pending(self) -> int:
        """Requests waiting for an instance."""
        return self._queue.qsize() + len(self._waiting)

    def unavailable_reason(self) -> str | None:
        """Why the model cannot serve now: every instance reports a reason (or None when one can serve)."""
        reasons = [i.unavailable_reason() for i in self._async_instances]
        if not reasons or any(r is None for r in reasons):
            return None
        return "; ".join(r for r in reasons if r)

    async def model_ready(self) -> bool:
        """The model's own readiness check (Python models' `is_ready`), asked of every instance."""
        for instance in self._async_instances:
            if not await instance.model_ready():
                return False
        return True

    def stop(self) -> None:
        """Finish queued jobs, then end the threads and close the instances."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        for slot in self._slots:
            slot.instance.close()
        waiting, self._waiting = self._waiting, collections.deque()
        for job in waiting:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                job.future.get_loop().call_soon_threadsafe(
                    _resolve, job.future, Unavailable(f"model {self._label} is unloading")
                )
        for instance in self._async_instances:
            instance.close()

    # instances driven from the event loop
    def _pick(self) -> int:
        """An idle instance, else one with room behind its current submission, else -1."""
        chosen = -1
        for index, outstanding in enumerate(self._outstanding):
            if outstanding == 0:
                return index
            if chosen < 0 and outstanding < self._async_instances[index].pipeline_depth:
                chosen = index
        return chosen

    def _submit(
        self,
        index: int,
        request: BackendRequest,
        future: asyncio.Future[Outputs],
        timing: RequestTiming | None,
        queued_ns: int,
    ) -> None:
        self._outstanding[index] += 1
        submitted_ns = 0
        if timing is not None:
            submitted_ns = time.perf_counter_ns()
            if queued_ns:
                timing.queue_ns = submitted_ns - queued_ns
        done = partial(self._finished, index, future, timing, submitted_ns)
        try:
            self._async_instances[index].submit((request,), done)
        except Exception as exc:  # submit itself failing must not lose the instance
            done(exc)

    def _finished(
        self,
        index: int,
        future: asyncio.Future[Outputs],
        timing: RequestTiming | None,
        submitted_ns: int,
        outcome: list[BackendResult] | BaseException,
    ) -> None:
        if timing is not None:
            timing.infer_ns = time.perf_counter_ns() - submitted_ns
        if isinstance(outcome, list) and len(outcome) == 1:
            _resolve(future, outcome[0])
        elif isinstance(outcome, NereidError):
            _resolve(future, outcome)
        elif isinstance(outcome, BaseException):  # an instance bug fails this request, not the scheduler
            _resolve(future, self._unexpected(outcome))
        else:
            _resolve(future, InternalError(f"model {self._label}: {len(outcome)} results for one request"))
        self._outstanding[index] -= 1
        # Requests wait only while every instance is full, so the one that just made room takes the oldest.
        while self._waiting:
            waiting = self._waiting.popleft()
            if not waiting.future.done():  # skip requests whose callers went away
                self._submit(index, waiting.request, waiting.future, waiting.timing, waiting.queued_ns)
                return

    # instances that block, on threads
    def _timed(
        self, instance: ModelInstance, request: BackendRequest, timing: RequestTiming | None
    ) -> BackendResult:
        start = time.perf_counter_ns()
        try:
            (result,) = instance.execute((request,))
            return result
        finally:
            elapsed_ns = time.perf_counter_ns() - start
            if timing is not None:
                timing.infer_ns = elapsed_ns
            elapsed = elapsed_ns / 1e9
            average = self._average_s
            self._average_s = elapsed if average is None else average + _SMOOTHING * (elapsed - average)

    def _unexpected(self, exc: BaseException) -> InternalError:
        log.error("model %s: unexpected error in execute", self._label, exc_info=exc)
        return InternalError(f"model {self._label}: {type(exc).__name__}: {exc}")

    def _run(self, slot: _Slot) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.future.cancelled():
                continue
            if job.timing is not None:
                job.timing.queue_ns = time.perf_counter_ns() - job.queued_ns
            try:
                with slot.lock:
                    result: BackendResult | BaseException = self._timed(
                        slot.instance, job.request, job.timing
                    )
            except NereidError as exc:
                result = exc
            except Exception as exc:  # a backend bug must fail this request, not the instance thread
                result = self._unexpected(exc)
            job.loop.call_soon_threadsafe(_resolve, job.future, result)


def _resolve(future: asyncio.Future[Outputs], result: BackendResult | BaseException) -> None:
    if future.done():  # cancelled while running: drop the result
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
