"""What every scheduler offers the engine: the seam between a request and a model's instances."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from nereid.backends.base import BackendRequest, BackendResult, Outputs
from nereid.scheduling.instances import InstancePool
from nereid.statistics import RequestTiming

log = logging.getLogger(__name__)
T = TypeVar("T")


# What a request's caller is handed, once: its outputs, or why it has none.
Result = BackendResult | BaseException
Done = Callable[[Result], None]


class Entry(Protocol):
    """A request a scheduler holds: `done` gets its outputs or its error once, on the event loop; None once
    answered, or once its caller withdrew it."""

    done: Done | None


class Submits(Protocol):
    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> Entry:
        """The one way a request reaches a model: `done` gets its outputs or its error exactly once, on the
        event loop (maybe before this returns, as a model run on the loop answers); `timing`, when given,
        receives its queue and execution times. Raises what refuses the request before it is queued."""
        ...

    def withdraw(self, entry: Any) -> None:
        """The caller of `enqueue` went away: the request is dropped where it waits, and its result once it
        ran; `done` is not called."""
        ...


class Scheduler(Submits, Protocol):
    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        """`enqueue`, awaited (see `outputs_of`)."""
        ...

    def pending(self) -> int:
        """Requests waiting for an instance (the pending-request gauge)."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why the model cannot serve now, or None."""
        ...

    async def model_ready(self) -> bool:
        """The model's own readiness check, where it has one."""
        ...

    def stop(self) -> None:
        """Answer or fail what is queued, then release the instances."""
        ...

    def refuse_new_sequences(self) -> None:
        """The server is stopping: refuse what would start a sequence; the ones started go on."""
        ...

    def waiting_sequences(self) -> int:
        """Sequences started, neither ended nor released, with no request in flight: a stopping server
        waits for them as for requests."""
        ...


async def outputs_of(scheduler: Submits, request: BackendRequest, timing: RequestTiming | None) -> Outputs:
    """A request's outputs, awaited over `enqueue`; a cancelled caller withdraws it."""
    answered: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
    entry = scheduler.enqueue(request, timing, partial(resolve, answered))
    try:
        return await answered
    except asyncio.CancelledError:
        scheduler.withdraw(entry)
        raise


def resolve(future: asyncio.Future[T], result: T | BaseException) -> None:
    """Settle a request's future once; a future already done (its caller went away) drops the result."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def settle(entry: Entry, result: Result) -> None:
    """Hand a request its result, once (unless its caller withdrew it)."""
    done = entry.done
    if done is not None:
        entry.done = None
        try:
            done(result)
        except Exception:  # one caller's failure must not keep the others (or the scheduler) waiting
            log.exception("a request's completion failed")


def record_timing(
    timing: RequestTiming | None, queued_ns: int, started_ns: int, infer_ns: int, batched: bool = False
) -> None:
    """A request's queue and execution times, read when it is answered; `batched`: its scheduler records
    the execution it shared with other requests."""
    if timing is not None:
        queue_ns = started_ns - queued_ns
        timing.queue_ns = queue_ns if queue_ns > 0 else 0
        timing.infer_ns = infer_ns
        timing.batched = batched


@dataclass(eq=False, slots=True)
class Job:
    """A request on its way to an instance (the default scheduler's, the sequence batcher's). Its outputs or
    its error go, once and on the event loop, to `done` (no future per request)."""

    request: BackendRequest
    timing: RequestTiming | None
    queued_ns: int
    done: Done | None
    arrival: float = 0.0  # monotonic seconds, where the scheduler orders by it

    def abandoned(self) -> bool:
        """Nobody waits for the result any more (answered, or its caller went away)."""
        return self.done is None


class PooledScheduler:
    """What the schedulers of an instance pool share: `execute` over `enqueue`, the pool's readiness and
    stop, and no sequences (the sequence batcher has its own)."""

    _label: str
    pool: InstancePool

    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> Entry:
        raise NotImplementedError

    def withdraw(self, entry: Any) -> None:
        raise NotImplementedError

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        return await outputs_of(self, request, timing)

    def refuse_new_sequences(self) -> None:
        """No sequences here."""

    def waiting_sequences(self) -> int:
        return 0

    def unavailable_reason(self) -> str | None:
        return self.pool.unavailable_reason()

    async def model_ready(self) -> bool:
        return await self.pool.model_ready()


class TaskEntry:
    """A request to a scheduler whose work is a coroutine (an ensemble's steps), run as a Task."""

    __slots__ = ("done", "task")

    def __init__(self, work: Coroutine[Any, Any, Outputs], done: Done) -> None:
        self.done: Done | None = done
        self.task = asyncio.ensure_future(work)
        self.task.add_done_callback(self._finished)

    def withdraw(self) -> None:
        self.done = None
        self.task.cancel()

    def _finished(self, task: asyncio.Future[Outputs]) -> None:
        if task.cancelled():
            settle(self, asyncio.CancelledError())  # cancelled from elsewhere (withdrawn: nobody is told)
            return
        error = task.exception()
        settle(self, task.result() if error is None else error)


# Triton's testing hooks: a batcher starts deciding only once this many requests are queued (a latch:
# once reached, it never holds again). The backlog count adds a condition for the sequence batcher:
# that many requests also wait in its backlog.
DELAY_SCHEDULER_ENV = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_SCHEDULER_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


def delay_count(variable: str) -> int:
    """A hook's count; unset, not a number or negative: 0 (no delay)."""
    try:
        return max(0, int(os.environ.get(variable, "0")))
    except ValueError:
        return 0
