"""Quick and brute search on known landscapes: quick measures at most a third and keeps 95% of the best."""

from __future__ import annotations

import pytest

from nereid.analyze.search import Goal, Measurement, Outcome, beats, brute, quick, quick_limit, ranked
from nereid.analyze.space import Choices
from tests.analyze.landscapes import (
    FakeMeasurer,
    ensemble_landscape,
    ensemble_space,
    flat_landscape,
    python_landscape,
    python_space,
)

CONCURRENCIES = (1, 4, 16, 64)


def neighbors(space, candidate):
    """Candidates that change one setting of `candidate`, each once, in dimension order."""
    return list(
        dict.fromkeys(step for i in range(len(space.dimensions)) for step in space.steps(candidate, i))
    )


def best_throughput(outcomes, goal):
    best = ranked(outcomes, goal)[0].best(goal)
    assert best is not None
    return best.throughput


@pytest.mark.parametrize(
    ("space", "landscape", "budget_ms"),
    [
        (python_space(), python_landscape, None),
        (python_space(), python_landscape, 10.0),
        (python_space(), flat_landscape, 20.0),
        (ensemble_space(), ensemble_landscape, None),
        (ensemble_space(), ensemble_landscape, 15.0),
    ],
    ids=["python", "python-budget", "flat", "ensemble", "ensemble-budget"],
)
def test_quick_reaches_95_percent_of_brute_with_a_third_of_its_candidates(space, landscape, budget_ms):
    goal = Goal(latency_budget_ms=budget_ms)
    brute_measurer, quick_measurer = FakeMeasurer(space, landscape), FakeMeasurer(space, landscape)
    brute_outcomes = list(brute(space, CONCURRENCIES, brute_measurer, goal))
    quick_outcomes = list(quick(space, CONCURRENCIES, quick_measurer, goal))
    assert (
        len(brute_outcomes) == space.size() == len(set(space.candidates())) == len(brute_measurer.candidates)
    )
    assert len(quick_measurer.candidates) <= len(brute_measurer.candidates) / 3
    assert best_throughput(quick_outcomes, goal) >= 0.95 * best_throughput(brute_outcomes, goal)


def test_brute_finds_the_known_peak():
    space = python_space()
    goal = Goal()
    outcomes = list(brute(space, CONCURRENCIES, FakeMeasurer(space, python_landscape), goal))
    chosen = space.settings(ranked(outcomes, goal)[0].candidate)["add_sub"]
    assert chosen == {
        "instances": 2,
        "execution_mode": "thread",
        "dynamic_batching": True,
        "max_batch_size": 32,
        "queue_delay_us": 0,
        "preferred": "max",
    }


def test_quick_stops_at_the_default_when_every_step_costs():
    space = python_space()
    outcomes = list(quick(space, CONCURRENCIES, FakeMeasurer(space, flat_landscape), Goal()))
    assert ranked(outcomes, Goal())[0].candidate == space.default()
    # the default and each of its neighbors, once
    assert len(outcomes) == 1 + len(neighbors(space, space.default()))


def test_the_latency_budget_stops_a_sweep_and_limits_the_choice():
    space = python_space(Choices(instances=(1,), execution_modes=("process",), dynamic_batching=(False,)))
    measurer = FakeMeasurer(space, python_landscape)
    goal = Goal(latency_budget_ms=5.0)
    (outcome,) = brute(space, CONCURRENCIES, measurer, goal)
    # 1000 * c / (c + 3) infer/s: p99 = 1.5 * c / throughput -> 6 ms at 1, 10.5 ms at 4
    assert [m.concurrency for m in outcome.measurements] == [1]
    assert outcome.best(goal) is None
    assert outcome.closest().concurrency == 1


def test_quick_keeps_climbing_past_a_candidate_that_fails_to_load():
    space = python_space()
    # the first candidate tried after the model's own config
    failing = list(quick(space, CONCURRENCIES, FakeMeasurer(space, python_landscape), Goal()))[1].candidate
    measurer = FakeMeasurer(space, python_landscape, failing=frozenset({space.key(failing)}))
    outcomes = list(quick(space, CONCURRENCIES, measurer, Goal()))
    failed = [o for o in outcomes if o.failure]
    assert [o.candidate for o in failed] == [failing]
    assert "failed to load" in failed[0].failure
    assert failing not in [o.candidate for o in ranked(outcomes, Goal())]
    assert best_throughput(outcomes, Goal()) > best_throughput(outcomes[:1], Goal())


def test_quick_never_measures_more_than_a_third():
    space = python_space()

    # climbs for ever: every step up any dimension is better
    def rising(settings, concurrency):
        s = settings["add_sub"]
        return (
            100.0
            * s["instances"]
            * (2 if s["execution_mode"] == "thread" else 1)
            * (1 + s["max_batch_size"] + s["queue_delay_us"] / 100 if s["dynamic_batching"] else 1)
            * concurrency
        )

    measurer = FakeMeasurer(space, rising)
    list(quick(space, CONCURRENCIES, measurer, Goal()))
    assert len(measurer.candidates) <= quick_limit(space) == space.size() // 3


def test_space_leaves_out_candidates_that_differ_only_in_unused_batching_settings():
    space = python_space(Choices(instances=(1,), execution_modes=("process",)))
    keys = [space.key(c) for c in space.candidates()]
    assert len(keys) == space.size()
    # batching off once, then on with 3 max batch sizes x 2 delays x 2 preferred
    assert len(keys) == len(set(keys)) == 1 + 3 * 2 * 2
    off = [k for k in keys if "dynamic_batching=off" in k]
    assert off == [
        "add_sub: instances=1 execution_mode=process dynamic_batching=off max_batch_size=64 "
        "queue_delay_us=0 preferred=max"
    ]


def test_override_sets_each_setting_in_the_config_json():
    space = ensemble_space()
    candidate = next(
        c
        for c in space.candidates()
        if space.settings(c)["detector"]
        == {
            "instances": 2,
            "intra_op_threads": 2,
            "dynamic_batching": True,
            "max_batch_size": 32,
            "queue_delay_us": 1000,
            "preferred": "half",
        }
        and space.settings(c)["pre"]["execution_mode"] == "thread"
    )
    detector = space.override(candidate, "detector")
    assert detector["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    assert detector["parameters"] == {"intra_op_thread_count": {"string_value": "2"}}
    assert detector["max_batch_size"] == 32
    assert detector["dynamic_batching"] == {
        "max_queue_delay_microseconds": 1000,
        "preferred_batch_size": [16],
    }
    # "max": none set, full batches as Triton prefers by default
    full = next(
        c
        for c in neighbors(space, candidate)
        if space.settings(c)["detector"]["preferred"] == "max"
        and space.settings(c)["detector"]["dynamic_batching"]
    )
    assert space.override(full, "detector")["dynamic_batching"] == {"max_queue_delay_microseconds": 1000}
    assert space.override(candidate, "pre")["parameters"] == {"EXECUTION_MODE": {"string_value": "thread"}}
    assert "parameters" not in space.override(space.default(), "detector")


def test_quick_measures_the_improving_changes_together():
    space = python_space(
        Choices(
            instances=(1, 2),
            execution_modes=("process", "thread"),
            max_batch_sizes=(8,),
            queue_delays_us=(0,),
            preferred=("max",),
        )
    )

    def together(settings, concurrency):  # each change helps a little, both together a lot
        s = settings["add_sub"]
        both = s["instances"] == 2 and s["execution_mode"] == "thread"
        return (
            (
                3000.0
                if both
                else 1000.0 + 100 * (s["instances"] == 2) + 100 * (s["execution_mode"] == "thread")
            )
            * concurrency
            / (concurrency + 1)
        )

    measurer = FakeMeasurer(space, together)
    outcomes = list(quick(space, CONCURRENCIES, measurer, Goal()))
    assert space.size() == 12 and len(outcomes) == quick_limit(space) == 4
    best = space.settings(ranked(outcomes, Goal())[0].candidate)["add_sub"]
    assert best["instances"] == 2 and best["execution_mode"] == "thread"


def test_quick_reaches_three_changes_within_a_third_of_a_small_space():
    """add_sub as measured on a quiet host: thread mode helps most, batching and a second instance a
    little each, and the best has all three. A third of this space is 4 candidates."""
    space = python_space(
        Choices(instances=(1, 2), max_batch_sizes=(8,), queue_delays_us=(0,), preferred=("max",))
    )

    def measured(settings, concurrency):
        s = settings["add_sub"]
        capacity = 5000.0 * (1.9 if s["execution_mode"] == "thread" else 1.0)
        capacity *= 1.15 if s["dynamic_batching"] else 1.0
        capacity *= 1.15 if s["instances"] == 2 and s["execution_mode"] == "thread" else 1.0
        return capacity * concurrency / (concurrency + 1)

    measurer = FakeMeasurer(space, measured)
    outcomes = list(quick(space, CONCURRENCIES, measurer, Goal()))
    assert space.size() == 12 and len(measurer.candidates) == quick_limit(space) == 4
    best = space.settings(ranked(outcomes, Goal())[0].candidate)["add_sub"]
    assert best["instances"] == 2 and best["execution_mode"] == "thread" and best["dynamic_batching"]


def _outcome(space, candidate, throughput, cpu_us):
    m = Measurement(16, throughput, 1.0, 1.5, 2.0, cpu_us, 100.0, int(throughput), True)
    return Outcome(candidate, (m,))


def test_within_the_noise_the_candidate_costing_less_cpu_ranks_first():
    space = python_space()
    a, b, c = list(space.candidates())[:3]
    # b measured 8% above a but costs more CPU per inference: a shared host's noise, a is cheaper
    ranking = ranked([_outcome(space, a, 10_000, 60), _outcome(space, b, 10_800, 70)], Goal())
    assert [o.candidate for o in ranking] == [a, b]
    # c 15% above: more than the noise, it wins whatever it costs
    ranking = ranked(
        [_outcome(space, a, 10_000, 60), _outcome(space, b, 10_800, 70), _outcome(space, c, 12_500, 90)],
        Goal(),
    )
    assert [o.candidate for o in ranking] == [c, b, a]
    # b within the noise of c and cheaper: first; a is not within it
    ranking = ranked(
        [_outcome(space, a, 10_000, 60), _outcome(space, b, 11_500, 70), _outcome(space, c, 12_500, 90)],
        Goal(),
    )
    assert [o.candidate for o in ranking] == [b, c, a]
    assert beats(_outcome(space, c, 12_500, 90), _outcome(space, a, 10_000, 60), Goal())
    assert not beats(_outcome(space, b, 10_800, 70), _outcome(space, a, 10_000, 60), Goal())
    assert beats(_outcome(space, a, 10_000, 60), _outcome(space, b, 10_800, 70), Goal())


def test_quick_does_not_move_on_a_gain_within_the_noise_that_costs_cpu():
    space = python_space(Choices(instances=(1, 2), execution_modes=("process",)))
    seen = []

    def measure(candidate, concurrency):  # a second instance: 5% more throughput, 20% more CPU
        seen.append(candidate)
        two = space.settings(candidate)["add_sub"]["instances"] == 2
        throughput = 1000.0 * concurrency * (1.05 if two else 1.0)
        return Measurement(concurrency, throughput, 1.0, 1.5, 2.0, 120.0 if two else 100.0, 100.0, 100, True)

    outcomes = list(quick(space, (1, 4), measure, Goal()))
    # batching on (no gain), then the second instance, then no setting left that gains: done
    assert len(outcomes) == 3 and any(space.settings(c)["add_sub"]["instances"] == 2 for c in seen)
    assert ranked(outcomes, Goal())[0].candidate == space.default()


def test_quick_measures_from_the_highest_concurrency_down():
    space = python_space(Choices(instances=(1,), execution_modes=("process",), dynamic_batching=(False,)))

    def saturating(settings, concurrency):  # more load, more throughput: the top and one below suffice
        return 1000.0 * concurrency / (concurrency + 3)

    def overloaded(settings, concurrency):  # past 4 requests in flight the server slows down
        return {1: 500.0, 4: 900.0, 16: 700.0, 64: 400.0}[concurrency]

    calls = []

    def measure_with(landscape):
        measurer = FakeMeasurer(space, landscape)

        def measure(candidate, concurrency):
            calls.append(concurrency)
            return measurer(candidate, concurrency)

        return measure

    (outcome,) = quick(space, CONCURRENCIES, measure_with(saturating), Goal())
    assert calls == [64, 16]
    assert outcome.best(Goal()).concurrency == 64
    calls.clear()
    (outcome,) = quick(space, CONCURRENCIES, measure_with(overloaded), Goal())
    assert calls == [64, 16, 4, 1]
    assert outcome.best(Goal()).concurrency == 4
    calls.clear()
    # p99 = 1.5 * c / throughput: 100 ms at 64, 28.5 ms at 16, 10.5 ms at 4, 6 ms at 1: the first two over a
    # 12 ms budget, then down to one below the first within it
    (outcome,) = quick(space, CONCURRENCIES, measure_with(saturating), Goal(latency_budget_ms=12.0))
    assert calls == [64, 16, 4, 1]
    assert outcome.best(Goal(latency_budget_ms=12.0)).concurrency == 4
