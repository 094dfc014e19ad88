"""Which queued requests form the next batch: a pure function of the queue and the clock.

The rules follow Triton's dynamic batcher: requests join in queue order (priority level first, then
arrival) while they fit in `max_batch_size` and have the same shape as the first one (a shape that
leaves out the inputs allowing ragged batches). No preferred size configured means `max_batch_size`
is the preferred size. Before the oldest has waited `max_queue_delay`, a batch goes at once when it
reaches a preferred size (the largest it can form) or when the queue holds more than the largest
preferred size (then what fits under it goes); a batch that is itself at or above the largest
preferred size, or that cannot grow (the next request would pass `max_batch_size` or has another
shape), goes at once too. Once the delay has passed (or with no delay), everything that fits goes.
Requests past their queue timeout are rejected or, with DELAY, go behind the others of their priority level (each level keeps its delayed requests after its own queue,
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
    keys = [
        (r.priority, r.delay_on_timeout and r.deadline is not None and now >= r.deadline, r.arrival)
        for r in queue
    ]
    return sorted(range(len(queue)), key=keys.__getitem__)  # stable: equal keys keep queue order


def decide(queue: Sequence[Pending], now: float, policy: BatchPolicy, instance_free: bool = True) -> Decision:
    # Called for every batch, with each request queued: written out for speed (one pass per step, the
    # policy's numbers in locals).
    reject = tuple(
        [
            i
            for i, r in enumerate(queue)
            if r.deadline is not None and now >= r.deadline and not r.delay_on_timeout
        ]
    )
    if reject:
        rejected = set(reject)
        candidates = [i for i in order(queue, now) if i not in rejected]
    else:
        rejected = set()
        candidates = order(queue, now)
    if not candidates or not instance_free:
        return Decision((), reject, _next_deadline(queue, now, rejected))
    max_batch_size = policy.max_batch_size
    # Triton's rule: no preferred size configured means max_batch_size is the one preferred size.
    preferred = set(policy.preferred_batch_sizes) or {max_batch_size}
    largest_preferred = max(preferred)
    batch: list[int] = []
    size = 0
    first_shape = queue[candidates[0]].shape
    best = 0  # requests in the batch to send at once, unless the delay is already exceeded; 0: none
    best_reason = ""
    stopped = ""  # why the next request cannot join: the batch cannot grow
    for i in candidates:
        request = queue[i]
        if batch:
            grown = size + request.batch_size
            if grown > largest_preferred and not best:
                # The queue holds more than the largest preferred size: what fits under it goes now.
                best = len(batch)
                best_reason = (
                    f"the next request would exceed max_batch_size {max_batch_size}"
                    if grown > max_batch_size
                    else f"the next request would exceed the largest preferred batch size {largest_preferred}"
                )
            if grown > max_batch_size:
                stopped = f"the next request would exceed max_batch_size {max_batch_size}"
                break
            if request.shape != first_shape:
                stopped = "the next request's input shapes differ (shape mismatch)"
                break
            size = grown
        else:
            size = request.batch_size
        batch.append(i)
        if size in preferred:
            best = len(batch)
            best_reason = (
                f"reached max_batch_size {size}"
                if size == max_batch_size
                else f"reached preferred batch size {size}"
            )
    delay = policy.max_queue_delay_s
    due = min([queue[i].arrival for i in batch]) + delay if delay else 0.0
    exceeded = delay > 0 and now >= due
    if best and not exceeded:
        return Decision(tuple(batch[:best]), reject, reason=best_reason)
    if stopped:
        return Decision(tuple(batch), reject, reason=stopped)
    if size >= largest_preferred:  # cannot grow into a preferred size any more
        return Decision(
            tuple(batch), reject, reason=f"reached the largest preferred batch size {largest_preferred}"
        )
    if exceeded or delay == 0:
        waited = (
            "max_queue_delay_microseconds is 0"
            if delay == 0
            else "the oldest request waited max_queue_delay_microseconds"
        )
        return Decision(tuple(batch), reject, reason=f"{waited} ({len(queue) - len(rejected)} queued)")
    deadline = _next_deadline(queue, now, rejected)
    return Decision((), reject, due if deadline is None else min(due, deadline))


def _next_deadline(queue: Sequence[Pending], now: float, rejected: set[int]) -> float | None:
    upcoming = [
        r.deadline for i, r in enumerate(queue) if i not in rejected and r.deadline and r.deadline > now
    ]
    return min(upcoming) if upcoming else None
