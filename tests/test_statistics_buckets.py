"""The histograms' buckets are chosen from nanoseconds: each duration lands in the bucket its value in
microseconds names, at the bounds and on either side of them."""

from __future__ import annotations

import bisect

from nereid.statistics import (
    QUEUE_DELAY_BUCKETS_US,
    REQUEST_DURATION_BUCKETS_US,
    ModelStatistics,
    RequestTiming,
)


def _durations(bounds_us: tuple[int, ...]) -> list[int]:
    """Nanosecond durations at, just under and just over every bound, and beyond the last."""
    durations = [0, 1, 999, 1000, 1001]
    for bound in bounds_us:
        durations += [bound * 1000 - 1, bound * 1000, bound * 1000 + 1]
    return durations + [bounds_us[-1] * 1000 * 7 + 3, 10**15 + 1]


def _buckets(bounds_us: tuple[int, ...], durations: list[int]) -> list[int]:
    """Counts per bucket as the bounds in microseconds give them."""
    counts = [0] * (len(bounds_us) + 1)
    for ns in durations:
        counts[bisect.bisect_left(bounds_us, ns / 1000)] += 1
    return counts


def test_queue_delays_and_request_durations_fall_in_the_buckets_of_their_microseconds() -> None:
    queues = _durations(QUEUE_DELAY_BUCKETS_US)
    requests = _durations(REQUEST_DURATION_BUCKETS_US)
    statistics = ModelStatistics()
    for i in range(max(len(queues), len(requests))):
        queue_ns = queues[i % len(queues)]
        request_ns = requests[i % len(requests)]
        statistics.record_batched_request(request_ns, RequestTiming(queue_ns, 5, True), 1, 2)
    count = max(len(queues), len(requests))
    wrapped = [queues[i % len(queues)] for i in range(count)]
    assert statistics.queue_delays == _buckets(QUEUE_DELAY_BUCKETS_US, wrapped)
    wrapped = [requests[i % len(requests)] for i in range(count)]
    assert statistics.request_durations == _buckets(REQUEST_DURATION_BUCKETS_US, wrapped)
    assert sum(statistics.queue_delays) == sum(statistics.request_durations) == count
