"""Triton's default scheduler: each request goes, FIFO, to the next free instance."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nereid.backends.base import ModelInstance
from nereid.errors import InternalError, NereidError
from nereid.statistics import RequestTiming

log = logging.getLogger(__name__)

Tensors = dict[str, np.ndarray]

# A model whose executions take less than this on average runs on the event loop when an instance is
# idle and nothing is queued: handing it to a thread and back costs more CPU than running it.
INLINE_EXECUTION_LIMIT_S = 100e-6
_SMOOTHING = 0.1


@dataclass(frozen=True, slots=True)
class _Job:
    inputs: Tensors
    outputs: Sequence[str]
    future: asyncio.Future[Tensors]
    loop: asyncio.AbstractEventLoop
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
    """

    def __init__(
        self,
        model_label: str,
        instances: Sequence[ModelInstance],
        inline_limit_s: float = INLINE_EXECUTION_LIMIT_S,
    ) -> None:
        self._label = model_label
        self._slots = [_Slot(instance) for instance in instances]
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._inline_limit_s = inline_limit_s
        self._average_s: float | None = None  # smoothed execution time, None until measured
        self._threads = [
            threading.Thread(target=self._run, args=(slot,), name=f"{model_label}-instance-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for thread in self._threads:
            thread.start()

    async def execute(
        self, inputs: Tensors, outputs: Sequence[str], timing: RequestTiming | None = None
    ) -> Tensors:
        """The requested outputs; `timing`, when given, receives the queue and execution times."""
        if self._average_s is not None and self._average_s < self._inline_limit_s and self._queue.empty():
            for slot in self._slots:
                if slot.lock.acquire(blocking=False):
                    try:
                        return self._timed(slot.instance, inputs, outputs, timing)
                    except NereidError:
                        raise
                    except Exception as exc:
                        raise self._unexpected(exc) from exc
                    finally:
                        slot.lock.release()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Tensors] = loop.create_future()
        self._queue.put(_Job(inputs, outputs, future, loop, timing, time.perf_counter_ns()))
        # If the caller is cancelled, the future is cancelled too and the worker skips or drops the job.
        return await future

    def pending(self) -> int:
        """Requests waiting for an instance."""
        return self._queue.qsize()

    def stop(self) -> None:
        """Finish queued jobs, then end the threads and close the instances."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        for slot in self._slots:
            slot.instance.close()

    def _timed(
        self, instance: ModelInstance, inputs: Tensors, outputs: Sequence[str], timing: RequestTiming | None
    ) -> Tensors:
        start = time.perf_counter_ns()
        try:
            return instance.execute(inputs, outputs)
        finally:
            elapsed_ns = time.perf_counter_ns() - start
            if timing is not None:
                timing.infer_ns = elapsed_ns
            elapsed = elapsed_ns / 1e9
            average = self._average_s
            self._average_s = elapsed if average is None else average + _SMOOTHING * (elapsed - average)

    def _unexpected(self, exc: Exception) -> InternalError:
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
                    result: Tensors | BaseException = self._timed(
                        slot.instance, job.inputs, job.outputs, job.timing
                    )
            except NereidError as exc:
                result = exc
            except Exception as exc:  # a backend bug must fail this request, not the instance thread
                result = self._unexpected(exc)
            job.loop.call_soon_threadsafe(_resolve, job.future, result)


def _resolve(future: asyncio.Future[Tensors], result: Tensors | BaseException) -> None:
    if future.done():  # cancelled while running: drop the result
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
