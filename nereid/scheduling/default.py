"""Triton's default scheduler: each request goes, FIFO, to the next free instance."""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from functools import partial

from nereid.backends.base import AsyncModelInstance, BackendRequest, BackendResult, ModelInstance
from nereid.scheduling.base import Done, Job, PooledScheduler, record_timing, settle
from nereid.scheduling.instances import INLINE_EXECUTION_LIMIT_S, InstancePool, unloading
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.statistics import RequestTiming


class DefaultScheduler(PooledScheduler):
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

    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> Job:
        """The Scheduler primitive: `done` gets the outputs or the error once, on the event loop. A model
        that runs inline has answered before this returns."""
        self.pool.check_open()
        job = Job(request, timing, time.perf_counter_ns() if timing is not None else 0, done)
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

    def stop(self) -> None:
        """Fail what waits, let running executions finish, then close the instances."""
        self.pool.stop(self._fail_waiting)

    def _finished(self, job: Job, results: list[BackendResult], started_ns: int, ended_ns: int) -> None:
        record_timing(job.timing, job.queued_ns, started_ns, ended_ns - started_ns)
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
            settle(job, unloading(self._label))
