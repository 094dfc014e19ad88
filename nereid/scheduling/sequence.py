"""Triton's sequence batcher: requests of one sequence (one correlation id) go, in order, to the batch
slot of one instance that the sequence holds from its START request to its END request.

Each instance has slots (direct: `max_batch_size` of them; oldest: `max_candidate_sequences`). A free
instance runs the oldest waiting request of each of its slots together, one batch row per sequence,
after adding the control inputs and the implicit state (sequence_tensors.py). The pure decisions live
in sequence_policy.py; this module is the event-loop shell around them, and the instance pool runs the
batches.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import (
    SEQUENCE_END,
    SEQUENCE_START,
    AsyncModelInstance,
    BackendRequest,
    BackendResult,
    ModelInstance,
    batch_elements,
)
from nereid.errors import InvalidArgument, Unavailable
from nereid.scheduling.base import (
    BACKLOG_DELAY_SCHEDULER_ENV,
    DELAY_SCHEDULER_ENV,
    Done,
    Job,
    PooledScheduler,
    delay_count,
    record_timing,
    settle,
)
from nereid.scheduling.batch_policy import BatchPolicy, Pending, decide
from nereid.scheduling.instances import InstancePool, unloading
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.scheduling.sequence_policy import DirectPolicy, SlotId, SlotTable, decide_direct, idle_expired
from nereid.scheduling.sequence_tensors import SequenceTensors, State
from nereid.statistics import ModelStatistics, RequestTiming

log = logging.getLogger(__name__)


class _Sequence:
    """One correlation id's requests waiting to run, its implicit state, and the slot it holds."""

    __slots__ = ("correlation_id", "expires_at", "jobs", "last_active", "running", "slot", "state")

    def __init__(self, correlation_id: int | str, now: float) -> None:
        self.correlation_id = correlation_id
        self.jobs: collections.deque[Job] = collections.deque()
        self.state: State | None = None
        self.slot: SlotId | None = None  # None while in the backlog
        self.running = False  # a request of it is executing
        self.last_active = now
        self.expires_at = math.inf  # while in the backlog: when its requests' earliest timeout passes


class _Batcher:
    """An instance's slots. Instances run their executions one after the other; a batch leaves out
    sequences whose previous request has not finished, so each sequence's requests run in order and each
    sees the state the one before it left."""

    __slots__ = ("index", "scheduled", "seated", "slots", "timer", "waiting")

    def __init__(self, index: int, slots: int) -> None:
        self.index = index  # the instance's, in the pool
        self.slots: list[_Sequence | None] = [None] * slots
        self.seated = 0  # slots holding a sequence
        # Seated sequences with a request to run and none running, in the order they became so: a batch
        # is formed from these without scanning every slot (the oldest strategy may have a thousand).
        self.waiting: dict[_Sequence, None] = {}
        self.scheduled = False  # a dispatch is due once the loop has taken in what arrived with this request
        self.timer: asyncio.TimerHandle | None = None


class SequenceBatcher(PooledScheduler):
    """Triton's sequence batcher for one model version: slots per instance, a backlog, idle release."""

    def __init__(
        self,
        model_label: str,
        config: mc.ModelConfig,
        instances: Sequence[ModelInstance | AsyncModelInstance],
        model_dir: Path | None = None,
        statistics: ModelStatistics | None = None,
        limiter: RateLimiter | None = None,
        claims: Sequence[Claim] = (),
    ) -> None:
        self._label = model_label
        self._statistics = statistics
        self._batch_dimension = config.max_batch_size > 0
        self._model = config.name
        batching = config.sequence_batching
        self._tensors = SequenceTensors(config, model_dir or Path("."))
        max_batch = max(1, config.max_batch_size)
        self._oldest: BatchPolicy | None = None
        if batching.HasField("oldest"):
            oldest = batching.oldest
            slots = max(1, oldest.max_candidate_sequences)
            preferred = tuple(s for s in oldest.preferred_batch_size if s <= max_batch)
            self._oldest = BatchPolicy(max_batch, preferred, oldest.max_queue_delay_microseconds / 1e6)
        else:
            slots = max_batch
        self._direct = DirectPolicy(
            slots,
            batching.direct.max_queue_delay_microseconds / 1e6,
            batching.direct.minimum_slot_utilization,
        )
        self._idle_s = batching.max_sequence_idle_microseconds / 1e6
        self._ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        # A worker process takes the next execution while it runs one (its pipeline depth), so that it never
        # waits for the loop; a blocking instance runs one at a time, and the next batch grows meanwhile.
        self.pool = InstancePool(model_label, instances, limiter=limiter, claims=claims)
        self.pool.on_room = self._dispatch_all
        self._batchers = [_Batcher(i, slots) for i in range(len(instances))]
        self._table: SlotTable[_Sequence] = SlotTable(len(self._batchers), slots)
        self._sequences: dict[int | str, _Sequence] = {}  # started and not yet ended
        # Set as the server stops: no sequence starts any more, and those started may still run to their
        # END (or their idle release) within --exit-timeout-secs, as in Triton.
        self._refusing_starts = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._backlog_timer: asyncio.TimerHandle | None = None
        self._backlog_timer_at = math.inf
        # Triton's testing hooks: no batch runs until this many requests wait in the slots of all instances
        # together and, with a backlog count as well, that many wait in the backlog.
        self._held_until = delay_count(DELAY_SCHEDULER_ENV)
        self._backlog_held_until = delay_count(BACKLOG_DELAY_SCHEDULER_ENV) if self._held_until else 0
        if self._held_until:
            log.info(
                "Delaying scheduler for %s until %d queued requests (%d in the backlog)...",
                model_label,
                self._held_until,
                self._backlog_held_until,
            )

    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> Job:
        """Queue a request behind the requests of its sequence before it: `done` gets its outputs or its
        error once, on the event loop."""
        if self._batch_dimension and batch_elements(request) > 1:
            # Triton's sequence batcher does not take requests that are batched already.
            raise InvalidArgument(
                f"inference request to model '{self._model}' must specify batch-size 1 due to requirements "
                "of sequence batcher"
            )
        correlation_id = request.correlation_id
        if correlation_id == 0 or correlation_id == "":
            raise InvalidArgument(
                f"inference request to model '{self._model}' must specify a non-zero or non-empty correlation ID"
            )
        self.pool.check_open()
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = time.monotonic()
        sequence = self._sequences.get(correlation_id)
        if self._refusing_starts and (sequence is None or request.flags & SEQUENCE_START):
            raise Unavailable(
                f"the server is stopping: model {self._label} takes requests of the sequences already "
                "started only"
            )
        if sequence is None:
            if not request.flags & SEQUENCE_START:
                raise InvalidArgument(
                    f"inference request for sequence {correlation_id} to model '{self._model}' must specify "
                    "the START flag on the first request of the sequence"
                )
            # The id's kind is checked as the sequence starts (Triton 2.51 names a missing START first);
            # every later request of the sequence carries the same id.
            self._tensors.check(request)
            sequence = self._sequences[correlation_id] = _Sequence(correlation_id, now)
            slot = self._table.start(sequence)
            if slot is not None:
                self._seat(sequence, slot)
        elif request.flags & SEQUENCE_START:
            # Triton's behaviour: the new START ends the old sequence, whose state the START resets.
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end before this "
                "sequence start. Previous sequence will be terminated early.",
                correlation_id,
                self._model,
            )
        queued_ns = time.perf_counter_ns() if timing is not None else 0
        job = Job(request, timing, queued_ns, done, now)
        sequence.jobs.append(job)
        sequence.last_active = now
        if request.flags & SEQUENCE_END:
            del self._sequences[correlation_id]  # later requests for this id must start a new sequence
        if sequence.slot is not None:
            batcher = self._batchers[sequence.slot.instance]
            if not sequence.running:
                batcher.waiting[sequence] = None
            if not batcher.scheduled:
                # Requests that arrive in the same turn of the loop (read from several connections at
                # once) join one batch: the dispatch runs after them, not for each.
                batcher.scheduled = True
                loop.call_soon(self._scheduled_dispatch, batcher)
        elif request.timeout_us:
            # Triton applies request timeouts only to sequences in the backlog: once the earliest passes,
            # every request of the sequence is refused and the sequence is forgotten.
            sequence.expires_at = min(sequence.expires_at, now + request.timeout_us / 1e6)
            self._arm_backlog_expiry(sequence.expires_at)
        if self._held_until:
            self._release_hold()
        self._arm_idle()
        return job

    def withdraw(self, job: Job) -> None:
        """Its caller went away: the request still runs when its turn comes, so that the sequence's state
        stays whole; its result is dropped."""
        job.done = None

    def pending(self) -> int:
        """Requests waiting to run, in slots and in the backlog."""
        seated = sum(len(s.jobs) for b in self._batchers for s in b.slots if s is not None)
        return seated + sum(len(s.jobs) for s in self._table.backlog())

    def active_sequences(self) -> int:
        """Sequences holding a slot or waiting in the backlog for one."""
        seated = sum(1 for b in self._batchers for s in b.slots if s is not None)
        return seated + len(self._table.backlog())

    def refuse_new_sequences(self) -> None:
        self._refusing_starts = True

    def waiting_sequences(self) -> int:
        return sum(1 for s in self._sequences.values() if not s.jobs and not s.running)

    def stop(self) -> None:
        """Fail what still waits, let running batches finish, then release the instances (callable from
        any thread)."""
        self.pool.stop(self._fail_waiting)

    def _fail_waiting(self) -> None:
        waiting = [s for b in self._batchers for s in b.slots if s is not None] + self._table.backlog()
        for sequence in waiting:
            while sequence.jobs:
                settle(sequence.jobs.popleft(), unloading(self._label))

    # slots
    def _seat(self, sequence: _Sequence, slot: SlotId) -> None:
        sequence.slot = slot
        batcher = self._batchers[slot.instance]
        batcher.slots[slot.slot] = sequence
        batcher.seated += 1
        if sequence.jobs and not sequence.running:
            batcher.waiting[sequence] = None

    def _release(self, sequence: _Sequence) -> None:
        """Free the sequence's slot; the oldest backlogged sequence takes it."""
        slot = sequence.slot
        if slot is None:
            return
        sequence.slot = None
        batcher = self._batchers[slot.instance]
        batcher.slots[slot.slot] = None
        batcher.seated -= 1
        batcher.waiting.pop(sequence, None)
        successor = self._table.release(slot)
        if successor is not None:
            self._seat(successor, slot)
            successor.last_active = time.monotonic()

    # batches
    def _dispatch_all(self) -> None:
        for batcher in self._batchers:
            self._dispatch(batcher)

    def _scheduled_dispatch(self, batcher: _Batcher) -> None:
        batcher.scheduled = False
        self._dispatch(batcher)

    def _release_hold(self) -> None:
        """Lift the testing hooks' hold for good once enough requests wait, and run what waits."""
        seated = sum(len(s.jobs) for b in self._batchers for s in b.slots if s is not None)
        backlogged = sum(len(s.jobs) for s in self._table.backlog())
        if seated < self._held_until or backlogged < self._backlog_held_until:
            return
        self._held_until = self._backlog_held_until = 0
        assert self._loop is not None
        self._loop.call_soon(self._dispatch_all)

    def _dispatch(self, batcher: _Batcher) -> None:
        pool = self.pool
        if self._held_until or pool.closed or not pool.can_take(batcher.index):
            return
        if batcher.timer is not None:
            batcher.timer.cancel()
            batcher.timer = None
        if not batcher.waiting:
            return
        ready = list(batcher.waiting)
        now = time.monotonic()
        chosen = self._choose(batcher, ready, now)
        if not chosen:
            return
        if self._oldest is None and self._batch_dimension:
            # Triton fills a direct batch with null requests up to the highest slot with a request
            # waiting (run now or left for a later batch for its shape), and counts them in the batch
            # size of its statistics (not as inferences). The instance here gets only the real
            # requests; the statistics report the batch as Triton's.
            batch_size = max(_slot_index(s) for s in ready) + 1
        else:
            batch_size = 0  # the elements of the requests, counted when they finish
        jobs: list[tuple[Job, _Sequence]] = []
        requests: list[BackendRequest] = []
        for sequence in chosen:
            job = sequence.jobs.popleft()
            requests.append(self._tensors.prepare(job.request, sequence.state))
            jobs.append((job, sequence))
            sequence.running = True
            del batcher.waiting[sequence]
            if job.request.flags & SEQUENCE_END:
                self._release(sequence)  # its slot can take a backlogged sequence now
        pool.submit(batcher.index, requests, partial(self._finished, batcher, jobs, batch_size))

    def _choose(self, batcher: _Batcher, ready: list[_Sequence], now: float) -> list[_Sequence]:
        """The sequences whose oldest request runs now; arms the batcher's timer when it should wait."""
        if self._oldest is None:
            wake = decide_direct([s.jobs[0].arrival for s in ready], now, self._direct)
            if wake is None:
                ready.sort(key=_slot_index)  # a batch row per slot, in slot order as in Triton
                # The lowest slot's request sets the shapes of the inputs that cannot be ragged; a slot
                # whose request differs waits for a later batch, as in Triton.
                first = self._shape(ready[0].jobs[0].request)
                return [s for s in ready if self._shape(s.jobs[0].request) == first]
            self._wake(batcher, wake - now)
            return []
        ready.sort(key=lambda s: s.jobs[0].arrival)
        pending = [
            Pending(self._tensors.rows(s.jobs[0].request), self._shape(s.jobs[0].request), s.jobs[0].arrival)
            for s in ready
        ]
        decision = decide(pending, now, self._oldest)
        if not decision.run and decision.wake_at is not None:
            self._wake(batcher, decision.wake_at - now)
        return [ready[i] for i in decision.run]

    def _shape(self, request: BackendRequest) -> tuple:
        """What must match for two requests to share a batch: the names, types and shapes past the batch
        dimension of the inputs that do not allow ragged batches."""
        return tuple(
            (name, a.dtype.str, a.shape[1:]) for name, a in request.inputs.items() if name not in self._ragged
        )

    def _wake(self, batcher: _Batcher, delay_s: float) -> None:
        if self._loop is not None:
            batcher.timer = self._loop.call_later(max(delay_s, 0.0), self._dispatch, batcher)

    def _finished(
        self,
        batcher: _Batcher,
        jobs: list[tuple[Job, _Sequence]],
        batch_size: int,
        results: list[BackendResult],
        started_ns: int,
        ended_ns: int,
    ) -> None:
        elapsed_ns = ended_ns - started_ns
        now = time.monotonic()
        for (job, sequence), result in zip(jobs, results, strict=True):
            record_timing(job.timing, job.queued_ns, started_ns, elapsed_ns, batched=True)  # recorded below
            if isinstance(result, dict) and self._tensors.has_state:
                sequence.state = self._tensors.take_state(job.request, result, sequence.state)
            sequence.running = False
            sequence.last_active = now
            if sequence.jobs and sequence.slot is not None:
                self._batchers[sequence.slot.instance].waiting[sequence] = None
            settle(job, result)
        if self._statistics is not None:
            inferences = (
                sum(batch_elements(j.request) for j, _ in jobs) if self._batch_dimension else len(jobs)
            )
            self._statistics.record_execution(
                batch_size or inferences, 0, elapsed_ns, 0, inferences=inferences
            )
        self._dispatch(batcher)

    # backlog timeouts
    def _arm_backlog_expiry(self, at: float) -> None:
        if at >= self._backlog_timer_at or self._loop is None:
            return
        if self._backlog_timer is not None:
            self._backlog_timer.cancel()
        self._backlog_timer_at = at
        self._backlog_timer = self._loop.call_later(max(0.0, at - time.monotonic()), self._expire_backlog)

    def _expire_backlog(self) -> None:
        self._backlog_timer, self._backlog_timer_at = None, math.inf
        if self.pool.closed:
            return
        now = time.monotonic()
        for sequence in self._table.backlog():
            if sequence.expires_at > now:
                self._arm_backlog_expiry(sequence.expires_at)
                continue
            self._table.withdraw(sequence)
            if self._sequences.get(sequence.correlation_id) is sequence:
                del self._sequences[sequence.correlation_id]  # a later request must START again
            while sequence.jobs:
                settle(
                    sequence.jobs.popleft(),
                    Unavailable("timeout of the corresponding sequence has been expired"),
                )

    # idle sequences
    def _arm_idle(self) -> None:
        if self._idle_timer is None and self._idle_s > 0 and self._loop is not None:
            self._idle_timer = self._loop.call_later(self._idle_s, self._expire_idle)

    def _expire_idle(self) -> None:
        """Release sequences that neither received nor ran a request for max_sequence_idle_microseconds;
        a later request for one of them is refused, as it has no START (Triton's behaviour)."""
        self._idle_timer = None
        if self.pool.closed:
            return
        seated = [s for b in self._batchers for s in b.slots if s is not None]
        quiet = {s: s.last_active for s in seated if not s.jobs and not s.running}
        now = time.monotonic()
        expired, next_at = idle_expired(quiet, now, self._idle_s)
        for sequence in expired:
            log.info(
                "sequence %s of model '%s' idle for more than %.0f us: released",
                sequence.correlation_id,
                self._model,
                self._idle_s * 1e6,
            )
            if self._sequences.get(sequence.correlation_id) is sequence:
                del self._sequences[sequence.correlation_id]
            slot = sequence.slot
            self._release(sequence)
            if slot is not None:
                self._dispatch(self._batchers[slot.instance])
        if any(s is not None for b in self._batchers for s in b.slots) and self._loop is not None:
            delay = (next_at - now) if next_at is not None else self._idle_s
            self._idle_timer = self._loop.call_later(max(delay, 0.0), self._expire_idle)


def _slot_index(sequence: _Sequence) -> int:
    return sequence.slot.slot if sequence.slot is not None else -1
