"""Triton's dynamic batcher: queue requests, and hand a free instance several at once.

Which requests form a batch, and when, is `batch_policy.decide`: a pure function of the queue and the
clock. This module is its asynchronous shell. Everything here runs on the event loop except the
execution itself: a blocking instance (ONNX Runtime, ...) runs each batch on a thread of its own and
concatenates the requests along the batch dimension; a Python model's worker gets the request list.
The queue is decided again whenever a request arrives, an instance frees up, or the policy asked to be
woken (a queue delay or a timeout falling due). Where each batch runs is the instance pool's business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial

from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import AsyncModelInstance, BackendRequest, BackendResult, ModelInstance
from nereid.errors import QueueFull, QueueTimeout, request_prefix
from nereid.scheduling.base import (
    DELAY_SCHEDULER_ENV,
    Done,
    PooledScheduler,
    delay_count,
    record_timing,
    settle,
)
from nereid.scheduling.batch_policy import BatchPolicy, Pending, decide
from nereid.scheduling.instances import InstancePool, unloading
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.statistics import ModelStatistics, RequestTiming

Clock = Callable[[], float]
# Request layouts whose policy view a batcher keeps at most; past that the table starts again.
MAX_LAYOUT_VIEWS = 256
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A priority level's `ModelQueuePolicy`."""

    delay_on_timeout: bool = False  # timeout_action DELAY; REJECT otherwise
    default_timeout_us: int = 0  # 0: requests never time out unless they ask to
    allow_timeout_override: bool = False  # a request's `timeout` may shorten the default
    max_queue_size: int = 0  # 0: unlimited

    @classmethod
    def from_config(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def timeout_us(self, requested_us: int) -> int:
        """The timeout that applies: a request may only shorten the default, and only when allowed."""
        if self.allow_timeout_override and requested_us > 0:
            return min(requested_us, self.default_timeout_us) if self.default_timeout_us else requested_us
        return self.default_timeout_us


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """What the batcher takes from `dynamic_batching` and the rest of the model config."""

    policy: BatchPolicy
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = QueuePolicy()
    level_queue_policies: dict[int, QueuePolicy] = field(default_factory=dict)
    ragged_inputs: frozenset[str] = frozenset()  # inputs whose shapes may differ within a batch

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatcherConfig:
        batching = config.dynamic_batching
        return cls(
            policy=BatchPolicy(
                max_batch_size=config.max_batch_size,
                preferred_batch_sizes=tuple(batching.preferred_batch_size),
                max_queue_delay_s=batching.max_queue_delay_microseconds / 1e6,
            ),
            preserve_ordering=batching.preserve_ordering,
            priority_levels=batching.priority_levels,
            default_priority_level=batching.default_priority_level,
            default_queue_policy=QueuePolicy.from_config(batching.default_queue_policy),
            level_queue_policies={
                level: QueuePolicy.from_config(p) for level, p in batching.priority_queue_policy.items()
            },
            ragged_inputs=frozenset(i.name for i in config.input if i.allow_ragged_batch),
        )

    def level(self, priority: int) -> int:
        """Triton's rule: 0, or a level beyond the configured ones, means the default level."""
        if priority <= 0 or priority > self.priority_levels:
            return self.default_priority_level
        return priority

    def queue_policy(self, level: int) -> QueuePolicy:
        return self.level_queue_policies.get(level, self.default_queue_policy)


class QueuedRequest(Pending):
    """A request in the batcher's queue, itself the Pending the policy reads (one object per request, not
    two; written out, since a dataclass could only take these fields by keyword, at a cost). Its outputs
    or its error go to `done`, called once on the event loop (no future, no callback scheduled per
    request)."""

    __slots__ = ("request", "timing", "queued_ns", "done")
    __eq__ = object.__eq__  # an entry is itself, whatever its fields: not a dataclass's equality
    __hash__ = object.__hash__

    def __init__(
        self,
        batch_size: int,
        shape: Hashable,
        arrival: float,
        priority: int,
        deadline: float | None,
        delay_on_timeout: bool,
        request: BackendRequest,
        timing: RequestTiming | None,
        queued_ns: int,
        done: Done,
    ) -> None:
        self.batch_size = batch_size
        self.shape = shape
        self.arrival = arrival
        self.priority = priority
        self.deadline = deadline
        self.delay_on_timeout = delay_on_timeout
        self.request = request
        self.timing = timing
        self.queued_ns = queued_ns
        self.done: Done | None = done


@dataclass(eq=False, slots=True)
class _Batch:
    entries: list[QueuedRequest]
    order: int  # dispatch order, for preserve_ordering
    results: list[BackendResult] = field(default_factory=list)
    started_ns: int = 0
    infer_ns: int = 0


class DynamicBatcher(PooledScheduler):
    def __init__(
        self,
        model_label: str,
        config: BatcherConfig,
        instances: Sequence[ModelInstance | AsyncModelInstance],
        statistics: ModelStatistics | None = None,
        clock: Clock = time.monotonic,
        limiter: RateLimiter | None = None,
        claims: Sequence[Claim] = (),
    ) -> None:
        self._label = model_label
        self._config = config
        self._policy = config.policy
        self._statistics = statistics
        self._clock = clock
        # Batches go to idle instances only, worker processes included (whatever their pipeline depth):
        # requests that arrive while a batch runs join the next batch, as in Triton, instead of leaving in
        # a small one queued behind the running batch.
        self.pool = InstancePool(model_label, instances, limiter=limiter, claims=claims)
        self.pool.on_room = self._schedule
        self._queue: list[QueuedRequest] = []
        self._queued_per_level: dict[int, int] = {}  # counted only where a level's queue is bounded
        self._bounded = any(
            p.max_queue_size for p in (config.default_queue_policy, *config.level_queue_policies.values())
        )
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dispatched = 0
        self._released = 0  # batches whose results went out, under preserve_ordering
        self._finished_early: dict[int, _Batch] = {}
        self._held_until = delay_count(
            DELAY_SCHEDULER_ENV
        )  # queued requests before the first decision; 0: none
        if self._held_until:
            log.info(
                "Delaying batcher thread for %s until %d queued requests...", model_label, self._held_until
            )
        self._deciding_soon = False  # a decision is due at the end of this turn of the event loop
        self._layout_views: dict[object, tuple[int, Hashable]] = {}  # by BackendRequest.layout
        # Without priority levels every request has the default level and its queue policy.
        self._one_level = (
            None
            if config.priority_levels
            else (config.default_priority_level, config.queue_policy(config.default_priority_level))
        )

    # the Scheduler protocol
    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> QueuedRequest:
        """Queue a request: `done` gets its outputs or its error once, on the event loop."""
        self.pool.check_open()
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        config = self._config
        if self._one_level is None:
            level = config.level(request.priority)
            queue_policy = config.queue_policy(level)
        else:
            level, queue_policy = self._one_level
        if (
            self._bounded
            and queue_policy.max_queue_size
            and self._queued_per_level.get(level, 0) >= queue_policy.max_queue_size
        ):
            raise QueueFull(f"{request_prefix(request.id)}Exceeds maximum queue size")
        now = self._clock()
        timeout_us = queue_policy.timeout_us(request.timeout_us)
        # The policy's view of it, the same for every request of a layout: kept, for the next one.
        layout = request.layout
        view = None if layout is None else self._layout_views.get(layout)
        if view is None:
            view = self._policy_view(request)
            if layout is not None:
                if len(self._layout_views) >= MAX_LAYOUT_VIEWS:
                    self._layout_views.clear()
                self._layout_views[layout] = view
        entry = QueuedRequest(
            view[0],
            view[1],
            now,
            level,
            now + timeout_us / 1e6 if timeout_us else None,
            queue_policy.delay_on_timeout,
            request,
            timing,
            time.perf_counter_ns(),
            done,
        )
        self._queue.append(entry)
        if self._bounded:
            self._queued_per_level[level] = self._queued_per_level.get(level, 0) + 1
        if entry.deadline is not None:  # so that it is rejected on time even while no instance is free
            self._arm(entry.deadline)
        self._decide_soon()  # once per turn of the loop: later requests join the first one's decision
        return entry

    def _policy_view(self, request: BackendRequest) -> tuple[int, Hashable]:
        """In one pass over its inputs: the batch size (the first input's first dimension) and the shapes
        it batches with (without the batch dimension and ragged inputs)."""
        batch_size = -1
        shapes = []
        ragged = self._config.ragged_inputs
        for name, array in request.inputs.items():
            shape = array.shape
            if batch_size < 0:
                batch_size = shape[0] if shape else 1
            if name not in ragged:
                shapes.append((name, shape[1:]))
        return batch_size if batch_size >= 0 else 1, tuple(shapes)

    def withdraw(self, entry: QueuedRequest) -> None:
        """Its caller went away: it leaves the queue; once its batch runs, its result is dropped."""
        entry.done = None
        if entry in self._queue:
            self._remove([entry])

    def pending(self) -> int:
        return len(self._queue)

    def stop(self) -> None:
        """Fail what is still queued, let running batches finish, then close the instances.
        Called from a thread other than the event loop's, or from the loop when it has stopped."""
        self.pool.stop(self._fail_queued)

    # deciding
    def _schedule(self, woken: bool = False) -> None:
        """Dispatch every batch the policy allows now; arm the timer for the next time it may change.
        `woken`: called by the timer, so timeouts are due even if no instance is free."""
        if self._held_until:
            if len(self._queue) < self._held_until:
                return
            self._held_until = 0
        while self._queue:
            instance = self.pool.idle()
            if instance < 0 and not woken:
                # Nothing can run. Every deadline in the queue has a timer armed (at arrival, or by the
                # last decision), so there is nothing to decide until an instance frees up or it fires.
                return
            now = self._clock()
            decision = decide(self._queue, now, self._policy, instance >= 0)
            if decision.reject:
                rejected = [self._queue[i] for i in decision.reject]
                chosen = [self._queue[i] for i in decision.run]
                self._remove(rejected)
                for entry in rejected:
                    settle(entry, QueueTimeout("Request timeout expired"))
            else:
                chosen = [self._queue[i] for i in decision.run]
            if not chosen:
                self._arm(decision.wake_at)
                return
            self._remove(chosen)
            if log.isEnabledFor(logging.DEBUG):  # --log-verbose: why batches are the size they are
                log.debug(
                    "model %s: batch of %d request(s), %d element(s): %s",
                    self._label,
                    len(chosen),
                    sum(e.batch_size for e in chosen),
                    decision.reason,
                )
            self._dispatch(instance, chosen)

    def _decide_soon(self) -> None:
        """Decide once the event loop has run the callbacks of this turn and read the sockets that are
        ready, not now: requests that have already arrived (read in this turn, or waiting in a socket's
        buffer while an instance finished) join the same batch, with one decision, one dispatch and one
        hand-off to the instance for all of them. The loop does not wait while a callback is ready, so this
        adds no delay of its own, and none to max_queue_delay."""
        if not self._deciding_soon:
            self._deciding_soon = True
            assert self._loop is not None
            self._loop.call_soon(self._decided_soon)

    def _decided_soon(self) -> None:
        self._deciding_soon = False
        self._schedule()

    def _arm(self, wake_at: float | None) -> None:
        if wake_at is None or (
            self._timer is not None and self._timer_at is not None and self._timer_at <= wake_at
        ):
            return
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = wake_at
        self._timer = self._loop.call_later(max(0.0, wake_at - self._clock()), self._wake)

    def _wake(self) -> None:
        self._timer = self._timer_at = None
        self._schedule(woken=True)

    def _remove(self, entries: list[QueuedRequest]) -> None:
        if len(entries) == len(self._queue):  # all of them (entries are queued, each once): the usual batch
            self._queue = []
        else:
            gone = set(map(id, entries))
            self._queue = [e for e in self._queue if id(e) not in gone]
        if self._bounded:
            for entry in entries:
                self._queued_per_level[entry.priority] -= 1

    # executing
    def _dispatch(self, index: int, entries: list[QueuedRequest]) -> None:
        batch = _Batch(entries, self._dispatched)
        self._dispatched += 1
        self.pool.submit(index, [e.request for e in entries], partial(self._finished, batch))

    def _finished(self, batch: _Batch, results: list[BackendResult], started_ns: int, ended_ns: int) -> None:
        batch.results = results
        batch.started_ns = started_ns
        batch.infer_ns = ended_ns - started_ns
        if self._config.preserve_ordering:
            # Answers go out in the order batches were dispatched, whichever instance finished first.
            self._finished_early[batch.order] = batch
            while self._released in self._finished_early:
                self._answer(self._finished_early.pop(self._released))
                self._released += 1
        else:
            self._answer(batch)
        self._decide_soon()

    def _answer(self, batch: _Batch) -> None:
        answering = time.perf_counter_ns()
        entries = batch.entries
        if self._statistics is not None:
            size = sum(e.batch_size for e in entries)
            self._statistics.record_execution(size, 0, batch.infer_ns, time.perf_counter_ns() - answering)
        started_ns = batch.started_ns
        infer_ns = batch.infer_ns
        for entry, result in zip(entries, batch.results, strict=True):
            record_timing(entry.timing, entry.queued_ns, started_ns, infer_ns, batched=True)
            settle(entry, result)

    def _fail_queued(self) -> None:
        queued, self._queue = self._queue, []
        self._queued_per_level.clear()
        for entry in queued:
            settle(entry, unloading(self._label))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
