"""Latency summaries (`--metrics-config summary_latencies=true`): quantiles over a sliding window.

Triton exports these as Prometheus summaries whose quantiles cover the last minute or so, with the
count and sum since start. The window keeps each observation with its time and drops the old ones;
quantiles are computed only when the metrics are scraped, so a request pays one append per latency.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np

# Triton's default quantiles and their allowed errors (the errors only matter to Triton's estimator: the
# window here keeps every observation, so its quantiles are exact).
DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001))
WINDOW_S = 60.0
MAX_OBSERVATIONS = 100_000  # per window: bounds memory under very high request rates


@dataclass
class Window:
    """One latency's observations (microseconds) of the last WINDOW_S seconds, plus totals since start."""

    count: int = 0
    sum: float = 0.0

    def __post_init__(self) -> None:
        self._seen: collections.deque[tuple[float, float]] = collections.deque(maxlen=MAX_OBSERVATIONS)

    def observe(self, value_us: float, now: float) -> None:
        self.count += 1
        self.sum += value_us
        self._seen.append((now, value_us))

    def quantiles(self, quantiles: tuple[float, ...], now: float) -> list[float]:
        """NaN for each quantile while the window is empty, as Prometheus client libraries report it."""
        while self._seen and self._seen[0][0] < now - WINDOW_S:
            self._seen.popleft()
        if not self._seen:
            return [float("nan")] * len(quantiles)
        values = np.fromiter((v for _, v in self._seen), dtype=np.float64, count=len(self._seen))
        return [float(q) for q in np.quantile(values, quantiles, method="inverted_cdf")]


class LatencySummaries:
    """The summaries of one model version: request, queue, compute input / infer / output, and the
    response cache's hits and misses (filled only when its responses are cached)."""

    NAMES = (
        "request",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    )

    def __init__(self) -> None:
        self.windows = {name: Window() for name in self.NAMES}

    def observe(self, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        now = time.monotonic()
        w = self.windows
        w["request"].observe(request_ns / 1000, now)
        w["queue"].observe(queue_ns / 1000, now)
        w["compute_input"].observe(input_ns / 1000, now)
        w["compute_infer"].observe(infer_ns / 1000, now)
        w["compute_output"].observe(output_ns / 1000, now)

    def observe_one(self, name: str, ns: int) -> None:
        self.windows[name].observe(ns / 1000, time.monotonic())

    def observe_failure(self, request_ns: int) -> None:
        self.windows["request"].observe(request_ns / 1000, time.monotonic())
