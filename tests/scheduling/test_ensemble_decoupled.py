"""Ensembles with a decoupled step: each of its responses carries on through the remaining steps as a
flow of its own and makes one response of the ensemble; the first error ends the request once the
running flows are done; `max_inflight_requests` bounds the flows in flight across requests."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, Outputs
from nereid.backends.responses import ResponseStream
from nereid.core.engine import Engine
from nereid.errors import DecoupledModel, NereidError, QueueFull
from nereid.scheduling.ensemble import EnsembleMembers, EnsembleScheduler, EnsembleStep
from nereid.types import InferRequest, InferResponse, InferTensor, StreamEvent
from tests.backends.serving import serving
from tests.scheduling.test_ensemble import FakeMembers, _sync

PIPELINES = Path(__file__).parent.parent / "pipelines" / "models"

STEPS = (
    EnsembleStep("producer", "", {"IN": "IN"}, {"OUT": "mid"}, decoupled=True),
    EnsembleStep("consumer", "", {"IN": "mid"}, {"OUT": "OUT"}),
)


class Members(FakeMembers):
    """`producer` sends IN responses, the k-th holding k; `consumer` adds 8 (its name's length), and
    can be held by a gate; the most consumer requests ever in flight at once is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.consuming = 0
        self.most_consuming = 0
        self.refuse_from = -1  # the consumer refuses inputs of this value and above (-1: none)
        self.produced = asyncio.Event()  # the producer sent its last response
        self.final_gate = asyncio.Event()  # the producer's final flag waits for it
        self.final_gate.set()

    async def infer(self, request: InferRequest) -> InferResponse:
        self.consuming += 1
        self.most_consuming = max(self.most_consuming, self.consuming)
        try:
            if 0 <= self.refuse_from <= int(request.inputs[0].data[0]):
                raise QueueFull("Exceeds maximum queue size")
            return await super().infer(request)
        finally:
            self.consuming -= 1

    async def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
        for k in range(int(request.inputs[0].data[0])):
            await asyncio.sleep(0)  # as a model's responses come: one at a time
            data = np.array([k], dtype=np.float32)
            yield StreamEvent(InferResponse("producer", "1", [InferTensor("OUT", "FP32", (1,), data)]))
        self.produced.set()
        await self.final_gate.wait()
        yield StreamEvent(None, None, True)


def _scheduler(members: Members, max_inflight: int = 0) -> EnsembleScheduler:
    config = mc.ModelConfig(name="e")
    config.ensemble_scheduling.max_inflight_requests = max_inflight

    def lookup(name: str, version: str) -> Any:
        raise AssertionError("not used")

    return EnsembleScheduler("e", STEPS, EnsembleMembers(lookup, members), config)  # type: ignore[arg-type]


async def _responses(scheduler: EnsembleScheduler, count: int) -> list[Outputs | NereidError | None]:
    """Everything the request's stream got, up to the final flag (which must come last)."""
    stream = ResponseStream()
    request = BackendRequest({"IN": np.array([count], dtype=np.int32)}, ("OUT",), "r", stream=stream)
    await scheduler.execute(request)
    items = []
    while True:
        result, final = await stream.get()
        items.append(result)
        if final:
            assert stream.finished
            return items


@_sync
async def test_each_response_of_the_decoupled_step_makes_one_response_the_last_one_final() -> None:
    members = Members()
    members.gates["consumer"] = gate = asyncio.Event()
    request = asyncio.ensure_future(_responses(_scheduler(members), 3))
    await members.produced.wait()  # the flows end after the producer: the last of them is final
    gate.set()
    items = await request
    assert sorted(float(item["OUT"][0]) for item in items) == [8.0, 9.0, 10.0]  # type: ignore[index]


@_sync
async def test_the_final_flag_goes_alone_when_the_producer_ends_last() -> None:
    members = Members()
    members.final_gate.clear()
    request = asyncio.ensure_future(_responses(_scheduler(members), 3))
    while members.consuming or len(members.requests) < 3:  # every flow ended
        await asyncio.sleep(0)
    members.final_gate.set()
    items = await request
    assert items[-1] is None
    assert sorted(float(item["OUT"][0]) for item in items[:-1]) == [8.0, 9.0, 10.0]  # type: ignore[index]


async def _most_in_flight(max_inflight: int) -> int:
    """Two requests of 5 responses each, the consumer held until the producers went as far as they may:
    how many consumer requests were in flight at most."""
    members = Members()
    members.gates["consumer"] = gate = asyncio.Event()
    scheduler = _scheduler(members, max_inflight)
    requests = asyncio.gather(_responses(scheduler, 5), _responses(scheduler, 5))
    await members.started_event("consumer").wait()
    for _ in range(50):
        await asyncio.sleep(0)
    gate.set()
    first, second = await requests
    assert len(first) == len(second) == 5
    return members.most_consuming


@_sync
async def test_max_inflight_requests_bounds_the_flows_of_all_requests() -> None:
    assert await _most_in_flight(2) == 2
    assert await _most_in_flight(0) == 10  # no bound


@_sync
async def test_the_first_error_ends_the_request_after_the_running_flows() -> None:
    members = Members()
    members.refuse_from = 2
    items = await _responses(_scheduler(members), 6)
    error = items[-1]
    assert isinstance(error, QueueFull)
    assert error.message == "in ensemble 'e', Exceeds maximum queue size"
    assert all(isinstance(item, dict) for item in items[:-1])
    assert 0 < len(items) - 1 < 6  # responses of the flows before the error, none after it


def test_an_ensemble_with_a_decoupled_step_is_decoupled_and_streams(tmp_path: Path) -> None:
    shutil.copytree(PIPELINES / "repeat", tmp_path / "repeat")
    (tmp_path / "copy" / "1").mkdir(parents=True)
    (tmp_path / "copy" / "config.pbtxt").write_text(
        'backend: "identity"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )
    (tmp_path / "fan" / "1").mkdir(parents=True)
    (tmp_path / "fan" / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },'
        ' { name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "RESULT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "ensemble_scheduling { max_inflight_requests: 1 step [\n"
        '  { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "IN" }'
        ' input_map { key: "DELAY_MS" value: "DELAY_MS" } output_map { key: "OUT" value: "one" } },\n'
        '  { model_name: "copy" model_version: -1 input_map { key: "INPUT0" value: "one" }'
        ' output_map { key: "OUTPUT0" value: "RESULT" } } ] }\n'
    )
    request = InferRequest(
        "fan",
        "",
        [
            InferTensor("IN", "INT32", (3,), np.array([4, 5, 6], np.int32)),
            InferTensor("DELAY_MS", "INT32", (1,), np.array([0], np.int32)),
        ],
    )

    async def stream(engine: Engine) -> list[int]:
        return [
            int(event.response.outputs[0].data[0])
            async for event in engine.infer_stream(request)
            if event.response is not None
        ]

    with serving(tmp_path, backend_config={"python": {"stub-timeout-seconds": "5"}}) as engine:
        assert engine.model_config("fan")["model_transaction_policy"] == {"decoupled": True}
        assert engine.model_config("fan")["ensemble_scheduling"]["max_inflight_requests"] == 1
        assert sorted(asyncio.run(stream(engine))) == [4, 5, 6]
        with pytest.raises(DecoupledModel):
            asyncio.run(engine.infer(request))
