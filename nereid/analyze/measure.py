"""Measuring one candidate at one concurrency in stable windows, with either load generator.

The rule is perf_analyzer's: windows of a fixed length follow each other until the last `count` of
them agree within `tolerance` on throughput and on average latency, or `max_windows` have passed (the
measurement is then kept, marked unstable). A window that completed no request never counts as
stable. The percentiles are over every request of the stable windows.

The default tolerance is 20%, where perf_analyzer's is 10%: successive one-second windows of one run on
a two-core host differed by up to 20% (9,299 to 11,198 infer/s), so a 10% rule failed most
measurements and cost ten windows and a second run each. The mean of three windows within 20% settles
well inside the 10% that the search treats as noise.
"""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nereid.analyze.checkpoint import BudgetSpent
from nereid.analyze.inputs import InputTensor
from nereid.analyze.loadgen import LoadError, Record, run_load
from nereid.analyze.search import CandidateFailed, Measurement


@dataclass(frozen=True)
class WindowRules:
    window_s: float = 1.0
    count: int = 3
    tolerance: float = 0.20
    max_windows: int = 10


@dataclass(frozen=True)
class Window:
    seconds: float
    latencies_s: tuple[float, ...]

    @property
    def throughput(self) -> float:
        return len(self.latencies_s) / self.seconds

    @property
    def mean_s(self) -> float:
        return sum(self.latencies_s) / len(self.latencies_s) if self.latencies_s else float("inf")


def stable(windows: Sequence[Window], rules: WindowRules) -> bool:
    """Whether the last `rules.count` windows agree within the tolerance (and each completed requests)."""
    last = windows[-rules.count :]
    if len(last) < rules.count or any(not w.latencies_s for w in last):
        return False
    for values in ([w.throughput for w in last], [w.mean_s for w in last]):
        mean = sum(values) / len(values)
        if any(abs(v - mean) > rules.tolerance * mean for v in values):
            return False
    return True


@dataclass(frozen=True)
class ServerUsage:
    """What the measured server spent: CPU seconds of all its processes, and their resident memory."""

    cpu_s: float
    rss_mb: float
    inferences: int


def summarize(
    windows: Sequence[Window], rules: WindowRules, concurrency: int, before: ServerUsage, after: ServerUsage
) -> Measurement:
    is_stable = stable(windows, rules)
    used = windows[-rules.count :]
    latencies = np.array([x for w in used for x in w.latencies_s]) * 1000.0
    seconds = sum(w.seconds for w in used)
    count = len(latencies)
    served = after.inferences - before.inferences
    if count == 0:
        raise CandidateFailed(
            f"no request completed at concurrency {concurrency} in {len(windows)} windows of {rules.window_s} s"
        )
    p50, p95, p99 = (float(x) for x in np.percentile(latencies, [50, 95, 99]))
    return Measurement(
        concurrency=concurrency,
        throughput=count / seconds,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        cpu_us_per_infer=(after.cpu_s - before.cpu_s) / served * 1e6 if served > 0 else 0.0,
        rss_mb=after.rss_mb,
        requests=count,
        stable=is_stable,
    )


# A window completes at least this many requests, else the windows grow (perf_analyzer asks for "a larger
# time window" in that case): percentiles of a handful of requests would say little, and slow models (an
# OCR pipeline on a busy host) complete none in a short window.
_MIN_WINDOW_REQUESTS = 10
_MAX_WINDOW_S = 16.0


class _Windows:
    """Cuts the load generator's record into windows at each call: a warm-up first (connections open,
    instances warm), then measured windows until they are stable or too many."""

    def __init__(
        self,
        rules: WindowRules,
        usage: Callable[[], ServerUsage],
        clock: Callable[[], float] = time.perf_counter,
        deadline: float | None = None,
    ) -> None:
        self.rules, self.usage, self._clock, self._deadline = rules, usage, clock, deadline
        self.window_s = rules.window_s
        self.windows: list[Window] = []
        self.before: ServerUsage | None = None
        self.after: ServerUsage | None = None
        self._calls, self._cut, self._at = 0, 0, 0.0

    def __call__(self, record: Record) -> float | None:
        now, end = self._clock(), len(record.done)
        self._calls += 1
        if self._calls == 1:
            return self.window_s * 0.5
        if self._calls > 2:
            latencies = tuple(latency for _, latency in record.done[self._cut : end])
            if len(latencies) < _MIN_WINDOW_REQUESTS and self.window_s * 2 <= _MAX_WINDOW_S:
                self.window_s *= 2
                self.windows.clear()  # windows of one length are compared with each other
            else:
                self.windows.append(Window(now - self._at, latencies))
            # past the time budget, the windows so far make the measurement (marked unstable)
            spent = self._deadline is not None and time.monotonic() >= self._deadline and self.windows
            if spent or stable(self.windows, self.rules) or len(self.windows) >= self.rules.max_windows:
                self.after = self.usage()
                return None
        else:
            self.before = self.usage()
        self._cut, self._at = end, self._clock()
        return self.window_s


def builtin_measure(
    url: str,
    protocol: str,
    model: str,
    inputs: Sequence[InputTensor],
    concurrency: int,
    rules: WindowRules,
    usage: Callable[[], ServerUsage],
    deadline: float | None = None,
) -> Measurement:
    """One measurement with the built-in load generator; a first half window warms up and is not kept."""
    cutter = _Windows(rules, usage, deadline=deadline)
    try:
        asyncio.run(run_load(url, protocol, model, inputs, concurrency, cutter))
    except (LoadError, OSError) as exc:
        raise CandidateFailed(f"requests failed at concurrency {concurrency}: {exc}") from None
    if cutter.before is None or cutter.after is None:
        raise CandidateFailed(f"the load stopped before its first window at concurrency {concurrency}")
    return summarize(cutter.windows, rules, concurrency, cutter.before, cutter.after)


_UNSTABLE = "Failed to obtain stable measurement"


def perf_analyzer_command(
    binary: str, url: str, protocol: str, model: str, concurrency: int, rules: WindowRules, input_data: str
) -> list[str]:
    return [
        binary,
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(int(rules.window_s * 1000)),
        "--stability-percentage",
        str(int(rules.tolerance * 100)),
        "--max-trials",
        str(rules.max_windows),
        "--input-data",
        input_data,
    ]


def parse_perf_analyzer_csv(text: str) -> dict[str, float]:
    """The first row of perf_analyzer's -f CSV: infer/s and latency percentiles in microseconds."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise CandidateFailed("perf_analyzer wrote no measurement")
    return {k: float(v) for k, v in rows[0].items() if k and v not in (None, "")}


def _run(command: list[str], deadline: float | None) -> subprocess.CompletedProcess[str]:
    timeout = None if deadline is None else max(5.0, deadline - time.monotonic())
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BudgetSpent from None


def perf_analyzer_measure(
    binary: str,
    url: str,
    protocol: str,
    model: str,
    input_data: str,
    concurrency: int,
    rules: WindowRules,
    usage: Callable[[], ServerUsage],
    scratch: Path,
    deadline: float | None = None,
) -> Measurement:
    """One measurement by perf_analyzer, its CSV read back; CPU per inference over its whole run. Past the
    time budget's `deadline` perf_analyzer is stopped and the measurement lost (BudgetSpent)."""
    out = scratch / "perf_analyzer.csv"
    out.unlink(missing_ok=True)
    command = perf_analyzer_command(binary, url, protocol, model, concurrency, rules, input_data)
    before = usage()
    done = _run(command + ["-f", str(out)], deadline)
    is_stable = True
    if done.returncode != 0 and _UNSTABLE in done.stdout + done.stderr:
        # A busy host fails perf_analyzer's stability rule (Model Analyzer then records nothing): the
        # measurement is taken once more with the rule relaxed, and kept marked unstable.
        is_stable = False
        relaxed = [*command, "-f", str(out)]
        relaxed[relaxed.index("--stability-percentage") + 1] = "1000"
        done = _run(relaxed, deadline)
    after = usage()
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CandidateFailed(f"perf_analyzer failed at concurrency {concurrency}: {' '.join(tail)}")
    row = parse_perf_analyzer_csv(out.read_text())
    served = after.inferences - before.inferences
    return Measurement(
        concurrency=concurrency,
        throughput=row["Inferences/Second"],
        p50_ms=row.get("p50 latency", 0.0) / 1000.0,
        p95_ms=row.get("p95 latency", 0.0) / 1000.0,
        p99_ms=row.get("p99 latency", 0.0) / 1000.0,
        cpu_us_per_infer=(after.cpu_s - before.cpu_s) / served * 1e6 if served > 0 else 0.0,
        rss_mb=after.rss_mb,
        requests=served,
        stable=is_stable,
    )
