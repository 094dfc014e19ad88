"""Why are my batches small? A pure reading of a few seconds of a model's batching statistics.

The answer is a code and its numbers, not a sentence, so that the console can word it in the reader's
language. The reasoning follows docs/batching.md: a batch holds what is waiting when an instance frees
up (plus what arrives within max_queue_delay_microseconds), so batches stay small when fewer requests
are in flight than there are instances, or when the batcher does not wait at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BatchingSetup:
    """What the model's configuration says about batching."""

    max_batch_size: int
    dynamic_batching: bool
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1
    ensemble: bool = False  # an ensemble does not batch; its composing models do


@dataclass(frozen=True)
class BatchingWindow:
    """What changed over the last `seconds`: successful requests, executions and batch elements."""

    seconds: float
    requests: int
    executions: int
    inferences: int
    request_ns: int  # summed over the requests: arrival to response
    queue_ns: int  # summed over the requests: time in the scheduler's queue


@dataclass(frozen=True)
class Hint:
    code: str  # idle, ensemble, unbatched_model, batcher_off, low_concurrency, zero_delay, short_delay, full, good
    values: dict[str, float] = field(default_factory=dict)


def batching_hint(setup: BatchingSetup, window: BatchingWindow) -> Hint:
    if window.requests == 0 or window.executions == 0 or window.seconds <= 0:
        return Hint("idle")
    mean_batch = window.inferences / window.executions
    rate = window.requests / window.seconds
    # Little's law: the requests in flight on average, from their rate and how long each took.
    concurrency = window.request_ns / 1e9 / window.seconds
    values = {
        "mean_batch": round(mean_batch, 2),
        "max_batch": setup.max_batch_size,
        "rate": round(rate, 1),
        "concurrency": round(concurrency, 2),
        "instances": setup.instances,
        "delay_us": setup.max_queue_delay_us,
        "queue_ms": round(window.queue_ns / window.requests / 1e6, 3),
    }
    if setup.ensemble:
        return Hint("ensemble", values)
    if setup.max_batch_size <= 0:
        return Hint("unbatched_model", values)
    if not setup.dynamic_batching:
        return Hint("batcher_off", values)
    if mean_batch >= 0.9 * setup.max_batch_size:
        return Hint("full", values)
    target = max(setup.preferred_batch_sizes, default=0) or setup.max_batch_size / 2
    if mean_batch >= target:
        return Hint("good", values)
    # Fewer requests in flight than instances: each one finds an idle instance and runs alone.
    if concurrency < setup.instances + 1:
        return Hint("low_concurrency", values)
    if setup.max_queue_delay_us == 0:
        return Hint("zero_delay", values)
    return Hint("short_delay", values)
