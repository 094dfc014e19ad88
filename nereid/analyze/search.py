"""Search strategies, as pure functions of a measurer: `brute` tries every candidate, `quick` climbs.

Both are generators of `Outcome`s, one per candidate measured, so the caller prints progress, stops on
its budget, and keeps what was measured when interrupted. A measurer is `measure(candidate,
concurrency) -> Measurement`; it raises `CandidateFailed` when the candidate cannot be served.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass

from nereid.analyze.space import (
    DYNAMIC_BATCHING,
    EXECUTION_MODE,
    INSTANCES,
    INTRA_OP_THREADS,
    MAX_BATCH_SIZE,
    PREFERRED,
    QUEUE_DELAY_US,
    Candidate,
    Space,
)

# Quick search goes on lowering the concurrency only while throughput rises by more than this.
_GAIN = 0.05
# Throughputs closer than this are within a shared host's noise (the same config measured twice on two
# busy cores differed by 10 to 20%): between two such candidates the one spending less CPU per inference
# is taken, the steadier figure, and the one that decides throughput once the cores are busy.
_NOISE = 0.10
# The order quick search tries settings in. Dynamic batching first: it decides how many executions the
# rest costs, and thread mode pays most once requests are batched (add_sub at concurrency 16: thread mode
# alone was slower than process mode, thread mode with batching the fastest of all). Instance counts and
# ONNX Runtime's threads share the cores out among instances; the finer batching settings matter least.
_PRIORITY = (
    DYNAMIC_BATCHING,
    EXECUTION_MODE,
    INSTANCES,
    INTRA_OP_THREADS,
    MAX_BATCH_SIZE,
    QUEUE_DELAY_US,
    PREFERRED,
)


@dataclass(frozen=True)
class Measurement:
    """One candidate at one concurrency, over stable windows."""

    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cpu_us_per_infer: float  # all the server's processes
    rss_mb: float  # all the server's processes, at the end
    requests: int
    stable: bool


@dataclass(frozen=True)
class Goal:
    latency_budget_ms: float | None = None  # on p99
    min_throughput: float = 0.0

    def within_latency(self, m: Measurement) -> bool:
        return self.latency_budget_ms is None or m.p99_ms <= self.latency_budget_ms

    def meets(self, m: Measurement) -> bool:
        return self.within_latency(m) and m.throughput >= self.min_throughput and m.requests > 0


@dataclass(frozen=True)
class Outcome:
    candidate: Candidate
    measurements: tuple[Measurement, ...]
    failure: str | None = None  # why the candidate could not be measured

    def best(self, goal: Goal) -> Measurement | None:
        """The highest throughput among the measurements that meet the goal."""
        met = [m for m in self.measurements if goal.meets(m)]
        return max(met, key=lambda m: m.throughput) if met else None

    def closest(self) -> Measurement | None:
        """The lowest p99 measured: what comes nearest a latency budget that nothing meets."""
        return min(self.measurements, key=lambda m: m.p99_ms) if self.measurements else None


class CandidateFailed(Exception):
    """The candidate could not be loaded or served; the search goes on without it."""


Measure = Callable[[Candidate, int], Measurement]


def score(outcome: Outcome, goal: Goal) -> tuple[int, float]:
    """Order of merit: candidates meeting the goal by throughput, then the others by lowest p99."""
    best = outcome.best(goal)
    if best is not None:
        return (1, best.throughput)
    closest = outcome.closest()
    return (0, -closest.p99_ms) if closest is not None else (-1, 0.0)


def beats(a: Outcome, b: Outcome, goal: Goal) -> bool:
    """Whether `a` is clearly better than `b`: higher in `score`, and where both meet the goal, more than
    the noise ahead in throughput, or within the noise and cheaper in CPU per inference."""
    score_a, score_b = score(a, goal), score(b, goal)
    if score_a[0] != score_b[0] or score_a[0] != 1:
        return score_a > score_b
    best_a, best_b = a.best(goal), b.best(goal)
    assert best_a is not None and best_b is not None  # noqa: S101 (both meet the goal)
    if best_a.throughput > best_b.throughput * (1 + _NOISE):
        return True
    within = best_a.throughput >= best_b.throughput * (1 - _NOISE)
    return within and best_a.cpu_us_per_infer < best_b.cpu_us_per_infer


def sweep(candidate: Candidate, concurrencies: Sequence[int], measure: Measure, goal: Goal) -> Outcome:
    """Brute search's: the candidate at rising concurrencies, until p99 leaves the budget (it only grows
    with load)."""
    measured: list[Measurement] = []
    try:
        for concurrency in sorted(concurrencies):
            m = measure(candidate, concurrency)
            measured.append(m)
            if not goal.within_latency(m):
                break
    except CandidateFailed as exc:
        return Outcome(candidate, tuple(measured), str(exc))
    return Outcome(candidate, tuple(measured))


def descend(candidate: Candidate, concurrencies: Sequence[int], measure: Measure, goal: Goal) -> Outcome:
    """Quick search's: the candidate from the highest concurrency down, since throughput mostly grows with
    load: past those whose p99 is over the budget, then on only while a lower concurrency gives clearly
    more throughput (an overloaded server can). Two measurements where a rising sweep takes them all."""
    measured: list[Measurement] = []
    previous: Measurement | None = None  # the last one within the budget
    try:
        for concurrency in sorted(concurrencies, reverse=True):
            m = measure(candidate, concurrency)
            measured.append(m)
            if not goal.within_latency(m):
                continue
            if previous is not None and m.throughput <= previous.throughput * (1 + _GAIN):
                break
            previous = m
    except CandidateFailed as exc:
        return Outcome(candidate, tuple(measured), str(exc))
    return Outcome(candidate, tuple(measured))


def brute(space: Space, concurrencies: Sequence[int], measure: Measure, goal: Goal) -> Iterator[Outcome]:
    """Every candidate of the space, each at every concurrency within the latency budget."""
    for candidate in space.candidates():
        yield sweep(candidate, concurrencies, measure, goal)


def quick_limit(space: Space) -> int:
    """Quick search measures at most a third of what brute search would."""
    return max(1, space.size() // 3)


def quick(space: Space, concurrencies: Sequence[int], measure: Measure, goal: Goal) -> Iterator[Outcome]:
    """Coordinate ascent from the models' own configs: one setting at a time, the settings that most
    often decide Nereid's speed first, each tried at its other values until one clearly beats the best so
    far; the search moves there at once and goes on with the next setting. When a whole round of settings
    brings no gain, an ensemble's search tries two settings of different members at once (it runs at its
    slowest step's pace, so when two steps are about as slow, speeding up either alone gains nothing);
    a single model's stops there. It never measures more than a third of the space.

    Moving at the first gain, rather than measuring every neighbor of a point before choosing, is what
    fits a third of a small space: on a Python model, dynamic batching, thread mode and a second instance
    each may help and help most together, and the climb reaches all three in four candidates."""
    limit = quick_limit(space)
    current = descend(space.default(), concurrencies, measure, goal)
    seen = {current.candidate}
    yield current
    order = sorted(range(len(space.dimensions)), key=lambda i: _PRIORITY.index(space.dimensions[i].name))

    def attempt(steps: Iterable[Candidate]) -> Generator[Outcome, None, Outcome | None]:
        """Measures the steps not measured yet until one clearly beats `current`, and returns it."""
        for step in steps:
            if step in seen:
                continue
            if len(seen) >= limit:
                return None
            seen.add(step)
            outcome = descend(step, concurrencies, measure, goal)
            yield outcome
            if beats(outcome, current, goal):
                return outcome
        return None

    unchanged, turn = 0, 0  # settings tried in a row without a gain; which one is next
    while len(seen) < limit:
        if unchanged < len(order):
            dimension = order[turn % len(order)]
            turn, unchanged = turn + 1, unchanged + 1
            better = yield from attempt(space.steps(current.candidate, dimension))
        elif len(space.models) > 1:
            better = yield from attempt(_pairs(space, current.candidate, order))
            if better is None:
                return
        else:
            return
        if better is not None:
            current, unchanged = better, 0


def _pairs(space: Space, candidate: Candidate, order: Sequence[int]) -> Iterator[Candidate]:
    """Candidates that change two settings of two different models, in the order of `order`."""
    for first, second in itertools.combinations(order, 2):
        if space.dimensions[first].model == space.dimensions[second].model:
            continue
        for step in space.steps(candidate, first):
            yield from space.steps(step, second)


def ranked(outcomes: Sequence[Outcome], goal: Goal) -> list[Outcome]:
    """Measured candidates, best first (failed ones left out): of those within the noise of the highest
    throughput that meets the goal, the lowest CPU per inference first; then the rest by `score`."""
    usable = sorted((o for o in outcomes if o.measurements), key=lambda o: score(o, goal), reverse=True)
    top = usable[0].best(goal) if usable else None
    if top is None:
        return usable
    close = [
        o for o in usable if (m := o.best(goal)) is not None and m.throughput >= top.throughput * (1 - _NOISE)
    ]
    close.sort(key=lambda o: o.best(goal).cpu_us_per_infer)  # type: ignore[union-attr]
    return close + usable[len(close) :]
