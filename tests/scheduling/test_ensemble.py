"""The ensemble scheduler with fake composing models: steps start when their inputs exist, independent
steps run together, a failure or a cancellation stops the steps still running."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any

import numpy as np
import pytest

from nereid.backends.base import SEQUENCE_START, BackendRequest
from nereid.errors import InvalidArgument, QueueFull
from nereid.scheduling.ensemble import EnsembleMembers, EnsembleScheduler, EnsembleStep, needed_steps
from nereid.statistics import ModelStatistics, RequestTiming
from nereid.types import InferRequest, InferResponse, InferTensor


class FakeMembers:
    """Each model adds its name's length to its one input; gates let a test hold a model back."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []
        self.requests: list[InferRequest] = []
        self.fail: set[str] = set()

    def started_event(self, model: str) -> asyncio.Event:
        return self.started.setdefault(model, asyncio.Event())

    async def infer(self, request: InferRequest) -> InferResponse:
        self.requests.append(request)
        self.started_event(request.model_name).set()
        try:
            if request.model_name in self.gates:
                await self.gates[request.model_name].wait()
        except asyncio.CancelledError:
            self.cancelled.append(request.model_name)
            raise
        if request.model_name in self.fail:
            raise InvalidArgument(f"model '{request.model_name}' refused it")
        total = sum(t.data for t in request.inputs) + len(request.model_name)
        outputs = [InferTensor(o.name, "FP32", total.shape, total) for o in request.outputs or []]
        return InferResponse(request.model_name, "1", outputs)


def _sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on an event loop of its own (the suite uses no asyncio plugin)."""

    @wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def _scheduler(fake: FakeMembers, steps: list[EnsembleStep]) -> EnsembleScheduler:
    def lookup(name: str, version: str) -> Any:
        raise AssertionError("not used")

    return EnsembleScheduler("e", tuple(steps), EnsembleMembers(lookup, fake))  # type: ignore[arg-type]


DIAMOND = [
    EnsembleStep("join", "", {"A": "a", "B": "b"}, {"OUT": "OUT"}),  # listed first: order does not matter
    EnsembleStep("left", "", {"IN": "IN"}, {"OUT": "a"}),
    EnsembleStep("right", "2", {"IN": "IN"}, {"OUT": "b"}),
]


def _request(**extra: Any) -> BackendRequest:
    return BackendRequest({"IN": np.zeros(2, dtype=np.float32)}, ("OUT",), "r1", **extra)


@_sync
async def test_independent_steps_run_together_and_the_join_waits_for_both() -> None:
    fake = FakeMembers()
    fake.gates = {"left": asyncio.Event(), "right": asyncio.Event()}
    timing = RequestTiming()
    run = asyncio.ensure_future(_scheduler(fake, DIAMOND).execute(_request(), timing))
    # both branches start while neither may finish: they are running at the same time
    await asyncio.wait_for(fake.started_event("left").wait(), 5)
    await asyncio.wait_for(fake.started_event("right").wait(), 5)
    fake.gates["left"].set()
    await asyncio.sleep(0)
    assert "join" not in fake.started
    fake.gates["right"].set()
    outputs = await asyncio.wait_for(run, 5)
    np.testing.assert_array_equal(outputs["OUT"], np.full(2, 4 + 5 + 4, dtype=np.float32))
    assert [(r.model_name, r.model_version) for r in fake.requests] == [
        ("left", ""),
        ("right", "2"),
        ("join", ""),
    ]
    assert all(r.id == "r1" for r in fake.requests)
    assert timing.infer_ns > 0


@_sync
async def test_a_failing_step_cancels_the_others_and_names_the_ensemble() -> None:
    fake = FakeMembers()
    fake.gates = {"right": asyncio.Event()}
    fake.fail = {"left"}
    with pytest.raises(InvalidArgument, match=r"^in ensemble 'e', model 'left' refused it$"):
        await asyncio.wait_for(_scheduler(fake, DIAMOND).execute(_request()), 5)
    assert fake.cancelled == ["right"]


@_sync
async def test_cancelling_the_request_cancels_its_steps() -> None:
    fake = FakeMembers()
    fake.gates = {"left": asyncio.Event(), "right": asyncio.Event()}
    run = asyncio.ensure_future(_scheduler(fake, DIAMOND).execute(_request()))
    await asyncio.wait_for(fake.started_event("right").wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert sorted(fake.cancelled) == ["left", "right"]


@_sync
async def test_request_controls_and_custom_parameters_reach_every_step() -> None:
    fake = FakeMembers()
    request = _request(
        parameters={"custom": "x"}, correlation_id=9, flags=SEQUENCE_START, timeout_us=500, priority=2
    )
    await _scheduler(fake, DIAMOND).execute(request)
    assert len(fake.requests) == 3
    for step in fake.requests:
        assert step.parameters == {"custom": "x"}
        assert (step.sequence_id, step.flags, step.timeout_us, step.priority) == (9, SEQUENCE_START, 500, 2)


@_sync
async def test_outputs_no_step_produced_are_left_out_and_steps_that_need_them_skipped() -> None:
    # As in Triton: a composing model may leave an output out; the ensemble answers without it, steps
    # that require it do not run, and steps for which it is optional run without it.
    fake = FakeMembers()
    steps = [
        EnsembleStep("left", "", {"IN": "IN"}, {"MISSING": "gap", "PRESENT": "OUT"}),
        EnsembleStep("needs", "", {"X": "gap"}, {"Y": "LOST"}),
        EnsembleStep("copes", "", {"X": "gap", "Z": "OUT"}, {"Y": "KEPT"}, optional_inputs=frozenset({"X"})),
    ]

    class LeavesOneOut:
        async def infer(self, request: InferRequest) -> InferResponse:
            if request.model_name == "left":
                data = request.inputs[0].data
                return InferResponse("left", "1", [InferTensor("PRESENT", "FP32", data.shape, data)])
            return await fake.infer(request)

    scheduler = EnsembleScheduler("e", tuple(steps), EnsembleMembers(lambda n, v: None, LeavesOneOut()))  # type: ignore[arg-type,return-value]
    request = _request()
    request.outputs = ("OUT", "LOST", "KEPT")
    outputs = await scheduler.execute(request)
    assert sorted(outputs) == ["KEPT", "OUT"]
    assert [(r.model_name, [t.name for t in r.inputs]) for r in fake.requests] == [("copes", ["Z"])]


@_sync
async def test_only_the_steps_that_make_the_requested_outputs_run() -> None:
    fake = FakeMembers()
    steps = [*DIAMOND, EnsembleStep("side", "", {"IN": "b"}, {"OUT": "SIDE"})]
    request = _request()
    request.outputs = ("SIDE",)
    outputs = await _scheduler(fake, steps).execute(request)
    assert list(outputs) == ["SIDE"]
    assert sorted(r.model_name for r in fake.requests) == ["right", "side"]  # neither join nor left
    assert [s.model_name for s in needed_steps(tuple(steps), ["OUT"])] == ["join", "left", "right"]


@_sync
async def test_a_failed_step_counts_among_the_ensembles_failures_unless_its_queue_refused_it() -> None:
    """Triton's rule: composing failures show in the ensemble's statistics too, with reason OTHER."""
    fake = FakeMembers()
    fake.fail.add("left")
    statistics = ModelStatistics()

    def lookup(name: str, version: str) -> Any:
        raise AssertionError("not used")

    scheduler = EnsembleScheduler("e", tuple(DIAMOND), EnsembleMembers(lookup, fake), None, statistics)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^in ensemble 'e', model 'left' refused it"):
        await scheduler.execute(_request())
    assert statistics.failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 0, "OTHER": 1}

    class Full(FakeMembers):
        async def infer(self, request: InferRequest) -> InferResponse:
            raise QueueFull("Exceeds maximum queue size")

    statistics = ModelStatistics()
    scheduler = EnsembleScheduler("e", tuple(DIAMOND), EnsembleMembers(lookup, Full()), None, statistics)  # type: ignore[arg-type]
    with pytest.raises(QueueFull):
        await scheduler.execute(_request())
    assert statistics.failures["OTHER"] == 0
