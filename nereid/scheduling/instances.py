"""The execution instances of one model version: which are free, where an execution runs, and its results.

Schedulers decide *what* runs next (their queue policies); the pool decides *where* and *how*. An instance
whose `execute` blocks (ONNX Runtime, PyTorch, ...) runs on a thread of its own, or on the event loop
itself when its executions take microseconds; an instance whose model runs in a worker process (the
Python backend) is submitted to from the event loop. Either way the scheduler hands the pool a list of
requests and gets one result per request back on the event loop, exceptions already turned into errors:
the single place where executions start and end, for rate limiting, warmup and tracing to plug into.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from nereid.backends.base import AsyncModelInstance, BackendRequest, BackendResult, ModelInstance
from nereid.errors import InternalError, NereidError, Unavailable
from nereid.scheduling.rate_limiter import Claim, RateLimiter

log = logging.getLogger(__name__)

# A model whose executions take less than this on average may run on the event loop while an instance is
# idle and nothing waits: handing it to a thread and back costs more CPU than running it.
INLINE_EXECUTION_LIMIT_S = 100e-6
_SMOOTHING = 0.1

# Called on the event loop when an execution ends: one result per request, and when it started and ended
# (perf_counter ns; for a worker process, from the submission).
Completion = Callable[[list[BackendResult], int, int], None]


@dataclass(slots=True)
class _Execution:
    requests: Sequence[BackendRequest]
    done: Completion
    loop: asyncio.AbstractEventLoop
    abandoned: Callable[[], bool] | None  # true once nobody waits for the results: skip it


class InstancePool:
    """The instances of one model version and the executions each holds.

    `thread_depth` is how many executions a blocking instance may hold: 1 runs one at a time; 2 keeps the
    next one ready on its thread so that it never waits for the event loop between two (the default
    scheduler's choice; a batcher would rather grow its next batch meanwhile). A worker-process instance
    holds up to its own `pipeline_depth`.

    With a rate limiter, an instance is idle only while the resources of its `claim` are free; each
    execution holds them while it runs (so each instance holds one execution at a time), and when they are
    released the pool calls `on_room`, for its scheduler to dispatch again.
    """

    def __init__(
        self,
        label: str,
        instances: Sequence[ModelInstance | AsyncModelInstance],
        *,
        thread_depth: int = 1,
        inline_limit_s: float = 0.0,
        limiter: RateLimiter | None = None,
        claims: Sequence[Claim] = (),
    ) -> None:
        self.label = label
        self._limiter = limiter
        self._claims = list(claims)
        if limiter is not None:
            limiter.register(self._claims)  # before any thread starts: an invalid claim fails the load
        self.on_room: Callable[[], None] = lambda: None
        self._instances = list(instances)
        # Checked once: an isinstance check against a runtime Protocol costs microseconds.
        self._async = [isinstance(i, AsyncModelInstance) for i in self._instances]
        # Blocking instances that may run on the event loop when fast (those whose model code may wait for
        # the server, or take long now and then, say no with `runs_inline = False`).
        self._inline = [
            not a and getattr(i, "runs_inline", True)
            for i, a in zip(self._instances, self._async, strict=True)
        ]
        self._outstanding = [0] * len(self._instances)
        self._thread_depth = thread_depth
        self._inline_limit_s = inline_limit_s
        self._average_s: float | None = None  # smoothed execution time of blocking instances
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the latest submission
        self.closed = False  # once stopping: new executions are refused (read on every request)
        self._jobs: list[queue.SimpleQueue[_Execution | None] | None] = []
        self._threads: list[threading.Thread] = []
        for index, instance in enumerate(self._instances):
            if self._async[index]:
                self._jobs.append(None)
                continue
            jobs: queue.SimpleQueue[_Execution | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._run,
                args=(index, cast(ModelInstance, instance), jobs),
                name=f"{label}-instance-{index}",
                daemon=True,
            )
            self._jobs.append(jobs)
            self._threads.append(thread)
            thread.start()

    def __len__(self) -> int:
        return len(self._instances)

    @property
    def instances(self) -> tuple[ModelInstance | AsyncModelInstance, ...]:
        return tuple(self._instances)

    # which instance
    def outstanding(self, index: int) -> int:
        """Executions the instance holds: running, or ready behind the running one."""
        return self._outstanding[index]

    def held_behind(self) -> int:
        """Executions that blocking instances hold ready behind the one each runs: not started yet."""
        pairs = zip(self._outstanding, self._async, strict=True)
        return sum(max(0, held - 1) for held, is_async in pairs if not is_async)

    def depth(self, index: int) -> int:
        """How many executions the instance may hold at once."""
        if self._limiter is not None:
            return 1
        if self._async[index]:
            return cast(AsyncModelInstance, self._instances[index]).pipeline_depth
        return self._thread_depth

    def idle(self) -> int:
        """An instance running nothing (and, when rate limited, whose resources are free), else -1."""
        for index, outstanding in enumerate(self._outstanding):
            if outstanding == 0 and (self._limiter is None or self._runnable(index)):
                return index
        return -1

    def _runnable(self, index: int) -> bool:
        limiter, claim = self._limiter, self._claims[index]
        assert limiter is not None
        if limiter.can_run(claim):
            return True
        limiter.wait(self, claim, self.on_room)
        return False

    def can_take(self, index: int) -> bool:
        """Whether instance `index` may take another execution now."""
        if self._outstanding[index] >= self.depth(index):
            return False
        return self._limiter is None or self._runnable(index)

    def with_room(self) -> int:
        """An idle instance, else one with room behind its current execution, else -1."""
        if self._limiter is not None:
            return self.idle()
        chosen = -1
        for index, outstanding in enumerate(self._outstanding):
            if outstanding == 0:
                return index
            if chosen < 0 and outstanding < self.depth(index):
                chosen = index
        return chosen

    def inline_index(self) -> int:
        """An idle blocking instance whose executions are fast enough to run on the event loop, else -1."""
        average = self._average_s
        if average is None or average >= self._inline_limit_s or self._limiter is not None:
            return -1
        for index, outstanding in enumerate(self._outstanding):
            if outstanding == 0 and self._inline[index]:
                return index
        return -1

    # executing
    def submit(
        self,
        index: int,
        requests: Sequence[BackendRequest],
        done: Completion,
        abandoned: Callable[[], bool] | None = None,
        *,
        limited: bool = True,
    ) -> None:
        """Start an execution on instance `index` (call on the event loop); `done` is called once, on the
        loop, when it ends. A blocking instance skips an execution held behind the running one when
        `abandoned()` has become true meanwhile (its callers went away). `limited` False runs it outside
        the rate limiter (warmup, before the version serves)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._attach(loop)
        if self.closed:
            error = unloading(self.label)
            done([error] * len(requests), 0, 0)
            return
        if limited and self._limiter is not None:
            claim = self._claims[index]
            if not self._limiter.acquire(claim):  # idle() saw the resources free on this turn of the loop
                raise InternalError(f"model {self.label}: rate limiter resources taken before dispatch")
            done = self._releasing(claim, done)
        self._outstanding[index] += 1
        jobs = self._jobs[index]
        if jobs is not None:
            jobs.put(_Execution(requests, done, loop, abandoned))
            return
        instance = cast(AsyncModelInstance, self._instances[index])
        started = time.perf_counter_ns()
        reported = False

        def finished(outcome: list[BackendResult] | BaseException) -> None:
            nonlocal reported
            if reported:  # an instance that reports twice must not free its place twice
                log.error("model %s: instance %d reported one execution twice", self.label, index)
                return
            reported = True
            self._complete(index, requests, done, outcome, started, time.perf_counter_ns())

        try:
            instance.submit(requests, finished)
        except Exception as exc:  # submit itself failing must not lose the instance
            finished(exc)

    def _releasing(self, claim: Claim, done: Completion) -> Completion:
        limiter = self._limiter
        assert limiter is not None

        def released(results: list[BackendResult], started: int, ended: int) -> None:
            limiter.release(claim)
            done(results, started, ended)

        return released

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Executions now come from `loop`: tell the instances that want to know (in-process Python models
        call the server there)."""
        self._loop = loop
        for instance in self._instances:
            on_loop = getattr(instance, "on_loop", None)
            if on_loop is not None:
                on_loop(loop)

    def run_inline(self, index: int, requests: Sequence[BackendRequest], done: Completion) -> None:
        """Run an execution on the event loop, now (an instance `inline_index` chose); `done` is called
        before this returns."""
        self._outstanding[index] += 1
        started = time.perf_counter_ns()
        try:
            outcome: list[BackendResult] | BaseException = cast(
                ModelInstance, self._instances[index]
            ).execute(requests)
        except Exception as exc:
            outcome = exc
        self._complete(index, requests, done, outcome, started, time.perf_counter_ns())

    def _run(self, index: int, instance: ModelInstance, jobs: queue.SimpleQueue[_Execution | None]) -> None:
        while True:
            execution = jobs.get()
            if execution is None:
                return
            started = time.perf_counter_ns()
            outcome: list[BackendResult] | BaseException
            if execution.abandoned is not None and execution.abandoned():
                outcome = Unavailable("the request was cancelled")  # nobody receives it
            else:
                try:
                    outcome = instance.execute(execution.requests)
                except BaseException as exc:  # a backend bug fails this execution, not the instance thread
                    outcome = exc
            ended = time.perf_counter_ns()
            try:
                execution.loop.call_soon_threadsafe(
                    self._complete, index, execution.requests, execution.done, outcome, started, ended
                )
            except RuntimeError:  # the loop closed while it ran: nobody waits for the results
                self._outstanding[index] -= 1

    def _complete(
        self,
        index: int,
        requests: Sequence[BackendRequest],
        done: Completion,
        outcome: list[BackendResult] | BaseException,
        started: int,
        ended: int,
    ) -> None:
        self._outstanding[index] -= 1
        if not self._async[index]:
            elapsed = (ended - started) / 1e9
            average = self._average_s
            self._average_s = elapsed if average is None else average + _SMOOTHING * (elapsed - average)
        # Tracing: one attribute read per request when it is off; when on, one clock reading, and the
        # execution's times left on each traced request's trace, recorded when the request is released.
        executed = None
        for request in requests:
            if request.trace is not None:
                if executed is None:
                    executed = (started, ended, time.perf_counter_ns())
                request.trace.executed = executed
        done(self._results(requests, outcome), started, ended)

    def _results(
        self, requests: Sequence[BackendRequest], outcome: list[BackendResult] | BaseException
    ) -> list[BackendResult]:
        """One result per request: a whole execution's failure fails each of its requests."""
        if isinstance(outcome, list) and len(outcome) == len(requests):
            return outcome
        error: NereidError
        if isinstance(outcome, NereidError):
            error = outcome
        elif isinstance(outcome, BaseException):
            log.error("model %s: unexpected error in execute", self.label, exc_info=outcome)
            error = InternalError(f"model {self.label}: {type(outcome).__name__}: {outcome}")
        else:
            error = InternalError(
                f"model {self.label}: the backend returned {len(outcome)} results for {len(requests)} requests"
            )
        return [error] * len(requests)

    # readiness
    def unavailable_reason(self) -> str | None:
        """Why the model cannot serve now: every worker-process instance reports a reason (None when one
        can serve, or when the instances are in-process)."""
        reasons = [
            cast(AsyncModelInstance, i).unavailable_reason()
            for i, is_async in zip(self._instances, self._async, strict=True)
            if is_async
        ]
        if not reasons or any(r is None for r in reasons):
            return None
        return "; ".join(r for r in reasons if r)

    async def model_ready(self) -> bool:
        """The model's own readiness check (Python models' `is_ready`), asked of every instance."""
        for instance in self._instances:
            ready = getattr(instance, "model_ready", None)  # in-process Python models have one too
            if ready is not None and not await ready():
                return False
        return True

    def check_open(self) -> None:
        """Refuse a request once the instances are closing (every scheduler's first check)."""
        if self.closed:
            raise unloading(self.label)

    # stopping
    def stop(self, fail_queued: Callable[[], None]) -> None:
        """Refuse new executions, have the scheduler fail what it still queues (`fail_queued`, run on the
        event loop), let running executions finish, then close the instances. Called from a thread other
        than the event loop's, or from the loop once it has stopped."""
        self.closed = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(fail_queued)
        for jobs in self._jobs:
            if jobs is not None:
                jobs.put(None)
        for thread in self._threads:
            thread.join()
        for instance in self._instances:
            instance.close()
        if self._limiter is not None:
            self._limiter.unregister(self._claims)


def unloading(label: str) -> Unavailable:
    """What a request to a model whose instances are closing is answered."""
    return Unavailable(f"model {label} is unloading")
