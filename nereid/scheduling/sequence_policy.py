"""The sequence batcher's decisions as plain functions and state: no clock, no event loop.

- `SlotTable`: which sequence holds which batch slot of which instance, and which sequences wait in the
  backlog for a slot to free (Triton's sequence batcher, "Scheduling Strategies").
- `decide_direct`: whether an instance runs its ready slots now or waits for more (direct strategy:
  `max_queue_delay_microseconds`, `minimum_slot_utilization`). The oldest strategy forms batches with
  the dynamic batcher's policy (`batch_policy.decide`) over the oldest request of each candidate sequence.
- `idle_expired`: sequences idle for longer than `max_sequence_idle_microseconds`.
"""

from __future__ import annotations

import collections
import heapq
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True, order=True, slots=True)
class SlotId:
    """A batch slot of an instance. Ordered slot first, so that new sequences spread over the instances
    before any instance takes a second one, as Triton hands out its lowest slot first."""

    slot: int
    instance: int


class SlotTable(Generic[Key]):
    """Slots of every instance; a sequence that starts while all are taken waits in the backlog."""

    def __init__(self, instances: int, slots_per_instance: int) -> None:
        self._free = [SlotId(s, i) for i in range(instances) for s in range(slots_per_instance)]
        heapq.heapify(self._free)
        self._holders: dict[SlotId, Key] = {}
        self._backlog: collections.deque[Key] = collections.deque()

    def start(self, key: Key) -> SlotId | None:
        """The slot the new sequence takes, or None when it joins the backlog."""
        if self._free:
            slot = heapq.heappop(self._free)
            self._holders[slot] = key
            return slot
        self._backlog.append(key)
        return None

    def release(self, slot: SlotId) -> Key | None:
        """Free the slot; the oldest backlogged sequence, if any, takes it and is returned."""
        self._holders.pop(slot, None)
        if self._backlog:
            key = self._backlog.popleft()
            self._holders[slot] = key
            return key
        heapq.heappush(self._free, slot)
        return None

    def withdraw(self, key: Key) -> None:
        """Take a sequence out of the backlog (its requests timed out there)."""
        self._backlog.remove(key)

    def holder(self, slot: SlotId) -> Key | None:
        return self._holders.get(slot)

    def backlog(self) -> list[Key]:
        return list(self._backlog)

    def free_slots(self) -> int:
        return len(self._free)


@dataclass(frozen=True, slots=True)
class DirectPolicy:
    slots: int  # slots of one instance
    max_queue_delay_s: float = 0.0
    minimum_slot_utilization: float = 0.0


def decide_direct(ready_arrivals: Sequence[float], now: float, policy: DirectPolicy) -> float | None:
    """None: run the ready slots now. Otherwise the time to decide again. As Triton's direct strategy,
    an instance waits only when both `max_queue_delay` and `minimum_slot_utilization` are set: until that
    share of its slots is ready, at most `max_queue_delay` after the oldest ready request arrived."""
    if not ready_arrivals:
        return math.inf
    if policy.max_queue_delay_s <= 0 or policy.minimum_slot_utilization <= 0:
        return None
    due = min(ready_arrivals) + policy.max_queue_delay_s
    if len(ready_arrivals) >= policy.minimum_slot_utilization * policy.slots or now >= due:
        return None
    return due


def idle_expired(
    last_active: Mapping[Key, float], now: float, idle_s: float
) -> tuple[list[Key], float | None]:
    """(sequences idle for `idle_s` or longer, when the next of the others expires)."""
    expired = [key for key, at in last_active.items() if now - at >= idle_s]
    remaining = [at + idle_s for key, at in last_active.items() if now - at < idle_s]
    return expired, (min(remaining) if remaining else None)
