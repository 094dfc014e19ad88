"""Ctrl-C keeps a checkpoint; the next run resumes from it and ends where an uninterrupted run ends."""

from __future__ import annotations

import pytest

from nereid.analyze.checkpoint import BudgetSpent, Checkpoint, CheckpointedMeasure
from nereid.analyze.search import Goal, quick, ranked
from tests.analyze.landscapes import FakeMeasurer, python_landscape, python_space

CONCURRENCIES = (1, 4, 16)
FINGERPRINT = {"model": "add_sub", "search": "quick"}


class Interrupting:
    """The fake measurer, with Ctrl-C arriving during measurement number `at`."""

    def __init__(self, inner: FakeMeasurer, at: int) -> None:
        self.inner, self.at, self.count = inner, at, 0
        self.loads: list[object] = []

    def load(self, candidate) -> None:
        self.loads.append(candidate)
        self.current = candidate

    def measure(self, concurrency: int):
        self.count += 1
        if self.count == self.at:
            raise KeyboardInterrupt
        return self.inner(self.current, concurrency)


def test_an_interrupted_search_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    space, goal = python_space(), Goal(latency_budget_ms=12.0)
    whole = list(quick(space, CONCURRENCIES, FakeMeasurer(space, python_landscape), goal))

    first = Interrupting(FakeMeasurer(space, python_landscape), at=9)
    path = tmp_path / "checkpoint.json"
    measure = CheckpointedMeasure(Checkpoint(path, FINGERPRINT), space.key, first.load, first.measure)
    with pytest.raises(KeyboardInterrupt):
        list(quick(space, CONCURRENCIES, measure, goal))
    assert measure.fresh == 8

    second = Interrupting(FakeMeasurer(space, python_landscape), at=0)
    checkpoint = Checkpoint(path, FINGERPRINT)
    assert checkpoint.resumed == 8
    resumed = CheckpointedMeasure(checkpoint, space.key, second.load, second.measure)
    outcomes = list(quick(space, CONCURRENCIES, resumed, goal))
    assert resumed.fresh == sum(len(o.measurements) for o in whole) - 8
    assert outcomes == whole
    assert ranked(outcomes, goal)[0].candidate == ranked(whole, goal)[0].candidate
    # the candidate cut short is loaded again; those measured whole are not
    assert first.loads[-1] == second.loads[0]
    assert len(set(first.loads) & set(second.loads)) == 1


def test_a_checkpoint_of_other_settings_is_set_aside(tmp_path):
    space = python_space()
    path = tmp_path / "checkpoint.json"
    fake = Interrupting(FakeMeasurer(space, python_landscape), at=0)
    CheckpointedMeasure(Checkpoint(path, FINGERPRINT), space.key, fake.load, fake.measure)(space.default(), 1)
    other = Checkpoint(path, {**FINGERPRINT, "search": "brute"})
    assert other.resumed == 0
    assert other.set_aside is not None and other.set_aside.exists()
    assert not path.exists()


def test_failures_are_kept_and_not_retried(tmp_path):
    space = python_space()
    path = tmp_path / "checkpoint.json"
    key = space.key(space.default())
    fake = FakeMeasurer(space, python_landscape, failing=frozenset({key}))
    measure = CheckpointedMeasure(
        Checkpoint(path, FINGERPRINT), space.key, lambda c: None, lambda c: fake(space.default(), c)
    )
    with pytest.raises(Exception, match="failed to load"):
        measure(space.default(), 1)
    again = CheckpointedMeasure(
        Checkpoint(path, FINGERPRINT),
        space.key,
        lambda c: None,
        lambda c: pytest.fail("measured a candidate that failed before"),
    )
    with pytest.raises(Exception, match="failed to load"):
        again(space.default(), 1)


def test_the_budget_stops_new_measurements_but_not_kept_ones(tmp_path):
    space = python_space()
    fake = FakeMeasurer(space, python_landscape)
    now = [0.0]
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", FINGERPRINT)
    measure = CheckpointedMeasure(
        checkpoint,
        space.key,
        lambda c: None,
        lambda c: fake(space.default(), c),
        deadline=10.0,
        clock=lambda: now[0],
    )
    kept = measure(space.default(), 1)
    now[0] = 10.0
    assert measure(space.default(), 1) == kept
    with pytest.raises(BudgetSpent):
        measure(space.default(), 4)
