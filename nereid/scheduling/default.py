"""Triton's default scheduler: each request goes, FIFO, to the next free instance."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from nereid.backends.base import AsyncModelInstance, BackendRequest, BackendResult, ModelInstance, Outputs
from nereid.errors import Unavailable
from nereid.scheduling.instances import INLINE_EXECUTION_LIMIT_S, InstancePool, settle
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.statistics import RequestTiming


@dataclass(eq=False, slots=True)
class Job:
    """A request on its way to an instance. Its outputs or its error go, once and on the event loop, to
    `done` where the caller gave one (no future per request), else to `future`."""

    request: BackendRequest
    future: asyncio.Future[Outputs] | None
    timing: RequestTiming | None
    queued_ns: int
    done: Callable[[BackendResult], None] | None = None

    def abandoned(self) -> bool:
        """Nobody waits for the result any more (answered, or its caller went away)."""
        future = self.future
        return self.done is None if future is None else future.done()


class DefaultScheduler:
    """Requests wait in one FIFO queue only while every instance is full; an instance that frees up takes
    the oldest. Each instance holds its running execution and the next one, so that its thread (or worker
    process) goes straight on to it. Models that finish in microseconds run on the event loop while an
    instance is idle and nothing waits, since the hand-off to a thread would cost more than the execution.
    """

    def __init__(
        self,
        model_label: str,
        instances: Sequence[ModelInstance | AsyncModelInstance],
        inline_limit_s: float = INLINE_EXECUTION_LIMIT_S,
        limiter: RateLimiter | None = None,
        claims: Sequence[Claim] = (),
    ) -> None:
        self._label = model_label
        self.pool = InstancePool(
            model_label,
            instances,
            thread_depth=2,
            inline_limit_s=inline_limit_s,
            limiter=limiter,
            claims=claims,
        )
        self.pool.on_room = self._dispatch_waiting
        self._waiting: collections.deque[Job] = collections.deque()

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        """The request's outputs; `timing`, when given, receives the queue and execution times."""
        if self.pool.closed:
            raise Unavailable(f"model {self._label} is unloading")
        future: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
        self._start(Job(request, future, timing, time.perf_counter_ns() if timing is not None else 0))
        # A cancelled caller leaves its request running if it started; the result is then dropped.
        return await future

    def enqueue(
        self, request: BackendRequest, timing: RequestTiming | None, done: Callable[[BackendResult], None]
    ) -> Job:
        """`execute` without waiting: `done` gets the outputs or the error once, on the event loop, for a
        caller that waits with no coroutine (the HTTP infer path). A model that runs inline has answered
        before this returns. A caller that goes away calls `withdraw`."""
        if self.pool.closed:
            raise Unavailable(f"model {self._label} is unloading")
        job = Job(request, None, timing, time.perf_counter_ns() if timing is not None else 0, done)
        self._start(job)
        return job

    def withdraw(self, job: Job) -> None:
        """Its caller went away: a request still waiting is skipped; one that started has its result
        dropped (as for a cancelled `execute`)."""
        job.done = None

    def _start(self, job: Job) -> None:
        pool = self.pool
        if self._waiting:
            self._waiting.append(job)
        elif (index := pool.inline_index()) >= 0:
            pool.run_inline(index, (job.request,), partial(self._finished, job))
        elif (index := pool.with_room()) >= 0:
            pool.submit(index, (job.request,), partial(self._finished, job), job.abandoned)
        else:
            self._waiting.append(job)

    def pending(self) -> int:
        """Requests waiting for an instance, those held ready behind a running execution included: as in
        Triton, a request is pending until it executes (nv_inference_pending_request_count)."""
        return len(self._waiting) + self.pool.held_behind()

    def refuse_new_sequences(self) -> None:
        """No sequences here."""

    def waiting_sequences(self) -> int:
        return 0

    def unavailable_reason(self) -> str | None:
        return self.pool.unavailable_reason()

    async def model_ready(self) -> bool:
        return await self.pool.model_ready()

    def stop(self) -> None:
        """Fail what waits, let running executions finish, then close the instances."""
        self.pool.stop(self._fail_waiting)

    def _finished(self, job: Job, results: list[BackendResult], started_ns: int, ended_ns: int) -> None:
        if job.timing is not None:
            job.timing.queue_ns = max(0, started_ns - job.queued_ns)
            job.timing.infer_ns = ended_ns - started_ns
        settle(job, results[0])
        if self._waiting:
            self._dispatch_waiting()

    def _dispatch_waiting(self) -> None:
        """An instance that made room takes the oldest request whose caller is still there."""
        pool = self.pool
        while self._waiting and (index := pool.with_room()) >= 0:
            waiting = self._waiting.popleft()
            if not waiting.abandoned():
                pool.submit(index, (waiting.request,), partial(self._finished, waiting), waiting.abandoned)

    def _fail_waiting(self) -> None:
        waiting, self._waiting = self._waiting, collections.deque()
        for job in waiting:
            settle(job, Unavailable(f"model {self._label} is unloading"))
