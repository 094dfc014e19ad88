"""Triton's default scheduler: each request goes, FIFO, to the next free instance."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nereid.backends.base import ModelInstance
from nereid.errors import InternalError, NereidError

log = logging.getLogger(__name__)

Tensors = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class _Job:
    inputs: Tensors
    outputs: Sequence[str]
    future: asyncio.Future[Tensors]
    loop: asyncio.AbstractEventLoop


class DefaultScheduler:
    """One thread per instance pulls from a shared queue, so a free instance takes the oldest request.

    Backends such as ONNX Runtime release the GIL while they compute, so instances really run in parallel.
    """

    def __init__(self, model_label: str, instances: Sequence[ModelInstance]) -> None:
        self._label = model_label
        self._instances = list(instances)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, args=(instance,), name=f"{model_label}-instance-{i}", daemon=True)
            for i, instance in enumerate(self._instances)
        ]
        for thread in self._threads:
            thread.start()

    async def execute(self, inputs: Tensors, outputs: Sequence[str]) -> Tensors:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Tensors] = loop.create_future()
        self._queue.put(_Job(inputs, outputs, future, loop))
        # If the caller is cancelled, the future is cancelled too and the worker skips or drops the job.
        return await future

    def stop(self) -> None:
        """Finish queued jobs, then end the threads and close the instances."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        for instance in self._instances:
            instance.close()

    def _run(self, instance: ModelInstance) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.future.cancelled():
                continue
            try:
                result: Tensors | BaseException = instance.execute(job.inputs, job.outputs)
            except NereidError as exc:
                result = exc
            except Exception as exc:  # a backend bug must fail this request, not the instance thread
                log.exception("model %s: unexpected error in execute", self._label)
                result = InternalError(f"model {self._label}: {type(exc).__name__}: {exc}")
            job.loop.call_soon_threadsafe(_resolve, job.future, result)


def _resolve(future: asyncio.Future[Tensors], result: Tensors | BaseException) -> None:
    if future.done():  # cancelled while running: drop the result
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
