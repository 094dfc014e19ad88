"""Which queued requests form the next batch: a pure function of the queue and the clock.

The rules follow Triton's dynamic batcher: requests join in queue order (priority level first, then
arrival) while they fit in `max_batch_size` and have the same shape as the first one (a shape that
leaves out the inputs allowing ragged batches). A batch goes at once when it reaches `max_batch_size`
or a preferred size (the largest it can form); otherwise it waits for more requests until the oldest has waited
`max_queue_delay` (0: no wait). Requests past their queue timeout are rejected or, with DELAY, go
behind the others of their priority level (each level keeps its delayed requests after its own queue,
ahead of the next level, as in Triton).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Pending:
    """What the policy needs to know of a queued request. Not frozen, though nothing changes it: one is
    made per request, and a frozen dataclass takes about four times as long to make."""

    batch_size: int  # elements along the batch dimension
    shape: Hashable  # shapes of its inputs without the batch dimension; requests batch only with equals
    arrival: float  # monotonic seconds
    priority: int = 0  # lower runs first, as Triton's priority levels
    deadline: float | None = None  # monotonic seconds after which its queue policy applies
    delay_on_timeout: bool = False  # timeout_action DELAY (True) or REJECT (False)


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """`run`: queue positions to execute now (possibly none). `reject`: positions timed out with REJECT.
    `wake_at`: when to decide again if nothing changes (None: only when a request arrives)."""

    run: tuple[int, ...]
    reject: tuple[int, ...] = ()
    wake_at: float | None = None
    reason: str = field(default="", compare=False)  # why `run` was cut where it was (the verbose log)


def order(queue: Sequence[Pending], now: float) -> list[int]:
    """Queue positions in the order they are served: priority, then arrival; timed-out DELAY
    requests after the others of their priority level."""
    return sorted(
        range(len(queue)),
        key=lambda i: (queue[i].priority, _delayed(queue[i], now), queue[i].arrival, i),
    )


def _delayed(request: Pending, now: float) -> bool:
    return request.delay_on_timeout and request.deadline is not None and now >= request.deadline


def decide(queue: Sequence[Pending], now: float, policy: BatchPolicy, instance_free: bool = True) -> Decision:
    reject = tuple(
        i
        for i, r in enumerate(queue)
        if r.deadline is not None and now >= r.deadline and not r.delay_on_timeout
    )
    rejected = set(reject)
    candidates = [i for i in order(queue, now) if i not in rejected]
    if not candidates or not instance_free:
        return Decision((), reject, _next_deadline(queue, now, rejected))
    batch: list[int] = []
    size = 0
    first_shape = queue[candidates[0]].shape
    sizes_reached: list[tuple[int, int]] = []  # (batch size, requests taken) at each step
    stopped = ""  # why the next request cannot join: the batch cannot grow
    for i in candidates:
        request = queue[i]
        if size + request.batch_size > policy.max_batch_size and batch:
            stopped = f"the next request would exceed max_batch_size {policy.max_batch_size}"
            break
        if batch and request.shape != first_shape:
            stopped = "the next request's input shapes differ (shape mismatch)"
            break
        batch.append(i)
        size += request.batch_size
        sizes_reached.append((size, len(batch)))
        if size >= policy.max_batch_size:
            return Decision(tuple(batch), reject, reason=f"reached max_batch_size {policy.max_batch_size}")
    preferred = [
        (reached, count) for reached, count in sizes_reached if reached in policy.preferred_batch_sizes
    ]
    if preferred:  # the largest preferred size it can form goes at once
        reached, count = preferred[-1]
        return Decision(tuple(batch[:count]), reject, reason=f"reached preferred batch size {reached}")
    due = min(queue[i].arrival for i in batch) + policy.max_queue_delay_s
    if stopped:
        return Decision(tuple(batch), reject, reason=stopped)
    if now >= due:
        waited = (
            "max_queue_delay_microseconds is 0"
            if policy.max_queue_delay_s == 0
            else ("the oldest request waited max_queue_delay_microseconds")
        )
        return Decision(tuple(batch), reject, reason=f"{waited} ({len(queue) - len(rejected)} queued)")
    deadline = _next_deadline(queue, now, rejected)
    return Decision((), reject, due if deadline is None else min(due, deadline))


def _next_deadline(queue: Sequence[Pending], now: float, rejected: set[int]) -> float | None:
    upcoming = [
        r.deadline for i, r in enumerate(queue) if i not in rejected and r.deadline and r.deadline > now
    ]
    return min(upcoming) if upcoming else None
