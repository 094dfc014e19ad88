"""Per model version counters behind the statistics extension and the Prometheus metrics.

Written from the event loop and from instance threads, so every update takes the lock; updates are a
handful of integer additions, cheap next to any inference.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from nereid.latency_summary import LatencySummaries

# Triton's failure reasons, as the `reason` label of nv_inference_request_failure
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

# Upper bounds, in microseconds, of the queue-delay histogram the metrics export (the last bucket, +Inf,
# is implicit): from "no wait" to the delays a badly tuned max_queue_delay produces.
QUEUE_DELAY_BUCKETS_US = (
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
)

# Upper bounds, in microseconds, of the request-duration histogram (successful requests, arrival to
# response): fine enough that quantiles interpolated between bounds (p50, p99) stay within a few percent.
REQUEST_DURATION_BUCKETS_US = (
    25, 50, 100, 175, 250, 375, 500, 750, 1_000, 1_500, 2_500, 3_500, 5_000, 7_500, 10_000, 15_000,
    25_000, 35_000, 50_000, 75_000, 100_000, 150_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000,
)  # fmt: skip


# The same bounds in nanoseconds, as requests are timed: a duration falls in the same bucket as its value
# in microseconds would, found by comparing integers (cheaper, on every request, than dividing first).
_QUEUE_DELAY_BOUNDS_NS = tuple(bound * 1000 for bound in QUEUE_DELAY_BUCKETS_US)
_REQUEST_DURATION_BOUNDS_NS = tuple(bound * 1000 for bound in REQUEST_DURATION_BUCKETS_US)


# Triton's default buckets of nv_inference_first_response_histogram_ms (a config's `model_metrics` may
# name others).
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)


class Histogram:
    """Observations counted per bucket (the last one +Inf), with their sum: one Prometheus histogram."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0
        self.count = 0

    def observe(self, value: int) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1


@dataclass(slots=True)
class RequestTiming:
    """Filled in by a scheduler for one request: how long it queued and how long its execution ran."""

    queue_ns: int = 0
    infer_ns: int = 0
    batched: bool = False  # the scheduler recorded the execution itself (it ran with other requests)


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


# How a decoupled model's response ended, as a backend reports it (Triton's response statistics)
RESPONSE_OUTCOMES = ("success", "fail", "empty_response", "cancel")


@dataclass
class _ResponseStats:
    """The responses at one position (first, second, ...) of their requests' streams."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {name: getattr(self, name).to_json() for name in self.__dataclass_fields__}


class ModelStatistics:
    """What Triton reports for one model version: requests, executions and where their time went."""

    def __init__(
        self, summaries: bool = False, first_response_buckets: tuple[float, ...] | None = None
    ) -> None:
        self._lock = threading.Lock()
        # time to first response, in whole milliseconds, when --metrics-config histogram_latencies=true
        self.first_response = (
            Histogram(first_response_buckets) if first_response_buckets is not None else None
        )
        # quantiles of each latency, when --metrics-config summary_latencies=true asks for them
        self.summaries = LatencySummaries() if summaries else None
        self.last_inference_ms = 0  # wall clock, milliseconds since the epoch
        self.inference_count = 0  # batch elements inferred
        self.execution_count = 0  # model executions (one per batch)
        self.success = Duration()
        self.fail = Duration()
        self.failures = dict.fromkeys(FAILURE_REASONS, 0)
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()  # lookups that answered the request
        self.cache_miss = Duration()  # lookups that did not, plus the insert of the response
        self._batches: dict[int, _BatchStats] = {}
        self._responses: dict[int, _ResponseStats] = {}  # by the response's index in its stream
        self.queue_delays = [0] * (len(QUEUE_DELAY_BUCKETS_US) + 1)  # requests per bucket, not cumulative
        self.request_durations = [0] * (len(REQUEST_DURATION_BUCKETS_US) + 1)  # the same, successes

    def record_request(
        self, batch_size: int, request_ns: int, timing: RequestTiming, input_ns: int, output_ns: int
    ) -> None:
        """A request that ran as an execution of its own (no batching with other requests)."""
        infer_ns = timing.infer_ns
        lock = self._lock
        lock.acquire()  # not `with`, whose enter and exit cost as much again: this runs on every request
        try:
            self._success(request_ns, timing.queue_ns, input_ns, infer_ns, output_ns)
            self._execution(batch_size, batch_size, input_ns, infer_ns, output_ns)
        finally:
            lock.release()

    def record_batched_request(
        self, request_ns: int, timing: RequestTiming, input_ns: int, output_ns: int
    ) -> None:
        """A request that ran in an execution the scheduler records with `record_execution`."""
        lock = self._lock
        lock.acquire()  # not `with`, as in record_request
        try:
            self._success(request_ns, timing.queue_ns, input_ns, timing.infer_ns, output_ns)
        finally:
            lock.release()

    def _success(self, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One successful request's times (under the lock). Written out rather than looped or through
        Duration.add: this runs on every request."""
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.success.count += 1
        self.success.ns += request_ns
        self.queue.count += 1
        self.queue.ns += queue_ns
        self.compute_input.count += 1
        self.compute_input.ns += input_ns
        self.compute_infer.count += 1
        self.compute_infer.ns += infer_ns
        self.compute_output.count += 1
        self.compute_output.ns += output_ns
        self.queue_delays[bisect.bisect_left(_QUEUE_DELAY_BOUNDS_NS, queue_ns)] += 1
        self.request_durations[bisect.bisect_left(_REQUEST_DURATION_BOUNDS_NS, request_ns)] += 1
        if self.summaries is not None:
            self.summaries.observe(request_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int, inferences: int | None = None
    ) -> None:
        """One execution of a batch of `batch_size` elements, however many requests it held.
        `inferences`: the elements that were real requests, where fewer (a direct sequence batch that
        Triton fills with null requests); by default all of them."""
        with self._lock:
            self._execution(
                batch_size, batch_size if inferences is None else inferences, input_ns, infer_ns, output_ns
            )

    def _execution(
        self, batch_size: int, inferences: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One execution's counts and its batch size's times (under the lock)."""
        self.execution_count += 1
        self.inference_count += inferences
        batch = self._batches.get(batch_size)
        if batch is None:
            batch = self._batches[batch_size] = _BatchStats()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)

    def batch_executions(self) -> dict[int, int]:
        """Executions per batch size."""
        with self._lock:
            return {size: b.compute_infer.count for size, b in sorted(self._batches.items())}

    def record_cache_hit(self, request_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """A request the response cache answered: a success that ran no execution (Triton's rule)."""
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.success.add(request_ns)
            self.queue.add(queue_ns)
            self.cache_hit.add(lookup_ns)
            if self.summaries is not None:
                self.summaries.observe_one("cache_hit", lookup_ns)

    def record_first_response(self, request_ns: int) -> None:
        histogram = self.first_response
        if histogram is not None:
            with self._lock:
                histogram.observe(request_ns // 1_000_000)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        with self._lock:
            self.cache_miss.add(lookup_and_insert_ns)
            if self.summaries is not None:
                self.summaries.observe_one("cache_miss", lookup_and_insert_ns)

    def record_response(
        self, index: int, outcome: str, start_ns: int, output_start_ns: int | None, end_ns: int
    ) -> None:
        """A decoupled model's `index`th response to a request, as its backend reports it: computed from
        `start_ns`, its outputs written from `output_start_ns` (None: it had none to write), and sent or
        given up at `end_ns`. A response with outputs or an error counts in compute_infer and
        compute_output; an empty one in compute_infer alone; a cancelled one only as cancelled."""
        with self._lock:
            stats = self._responses.get(index)
            if stats is None:
                stats = self._responses[index] = _ResponseStats()
            getattr(stats, outcome).add(end_ns - start_ns)
            if outcome == "cancel":
                return
            infer_end = end_ns if output_start_ns is None else output_start_ns
            stats.compute_infer.add(infer_end - start_ns)
            if output_start_ns is not None:
                stats.compute_output.add(end_ns - output_start_ns)

    def record_failure(self, request_ns: int, reason: str) -> None:
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.fail.add(request_ns)
            self.failures[reason] += 1
            if self.summaries is not None:
                self.summaries.observe_failure(request_ns)

    def to_json(self, name: str, version: str) -> dict[str, Any]:
        """One entry of `model_stats`, keys in Triton's order."""
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_json(),
                    "fail": self.fail.to_json(),
                    "queue": self.queue.to_json(),
                    "compute_input": self.compute_input.to_json(),
                    "compute_infer": self.compute_infer.to_json(),
                    "compute_output": self.compute_output.to_json(),
                    "cache_hit": self.cache_hit.to_json(),
                    "cache_miss": self.cache_miss.to_json(),
                },
                "response_stats": {str(i): r.to_json() for i, r in sorted(self._responses.items())},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": batch.compute_input.to_json(),
                        "compute_infer": batch.compute_infer.to_json(),
                        "compute_output": batch.compute_output.to_json(),
                    }
                    for size, batch in sorted(self._batches.items())
                ],
                "memory_usage": [],
            }
