"""Per model version counters behind the statistics extension and the Prometheus metrics.

Written from the event loop and from instance threads, so every update takes the lock; updates are a
handful of integer additions, cheap next to any inference.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

# Triton's failure reasons, as the `reason` label of nv_inference_request_failure
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class RequestTiming:
    """Filled in by a scheduler for one request: how long it queued and how long its execution ran."""

    queue_ns: int = 0
    infer_ns: int = 0


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


class ModelStatistics:
    """What Triton reports for one model version: requests, executions and where their time went."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        self._batches: dict[int, _BatchStats] = {}

    def record_request(
        self, batch_size: int, request_ns: int, timing: RequestTiming, input_ns: int, output_ns: int
    ) -> None:
        """A request that ran as an execution of its own (no batching with other requests)."""
        infer_ns, queue_ns = timing.infer_ns, timing.queue_ns
        # Written out rather than looped or through Duration.add: this runs on every request.
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.execution_count += 1
            self.inference_count += batch_size
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
            batch = self._batches.get(batch_size)
            if batch is None:
                batch = self._batches[batch_size] = _BatchStats()
            batch.compute_input.count += 1
            batch.compute_input.ns += input_ns
            batch.compute_infer.count += 1
            batch.compute_infer.ns += infer_ns
            batch.compute_output.count += 1
            batch.compute_output.ns += output_ns

    def record_failure(self, request_ns: int, reason: str) -> None:
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.fail.add(request_ns)
            self.failures[reason] += 1

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
                    "cache_hit": Duration().to_json(),
                    "cache_miss": Duration().to_json(),
                },
                "response_stats": {},
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
