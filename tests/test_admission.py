"""The admission path that unary and streamed requests share: counted in flight until answered, refused
requests counted nowhere, each admitted request recorded once (a stream stopped early as CANCELED)."""

from __future__ import annotations

import asyncio
import copy
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from nereid.backends.base import BackendRequest, Outputs
from nereid.core.engine import Engine
from nereid.core.request_checks import MAX_CHECKED_LAYOUTS, checked_request
from nereid.errors import InternalError, InvalidArgument
from nereid.scheduling.base import Done, TaskEntry, resolve
from nereid.shared_memory import SharedMemoryRef
from nereid.statistics import RequestTiming
from nereid.types import InferRequest, InferTensor, RequestedOutput
from tests.backends.serving import serving
from tests.conftest import EXAMPLES

PIPELINES = Path(__file__).parent / "pipelines" / "models"
PYTHON_MODELS = Path(__file__).parent / "backends" / "python" / "models"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("admission")
    shutil.copytree(EXAMPLES / "simple", root / "simple")
    shutil.copytree(PIPELINES / "repeat", root / "repeat")
    shutil.copytree(PYTHON_MODELS / "faulty", root / "faulty")
    with serving(
        root, backend_config={"python": {"stub-timeout-seconds": "5"}}, allow_client_shm=True
    ) as engine:
        yield engine


def _simple(datatype: str = "INT32") -> InferRequest:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [InferTensor(name, datatype, (1, 16), data) for name in ("INPUT0", "INPUT1")]
    return InferRequest("simple", "", inputs)


def _repeat(values: list[int], delay_ms: int = 0) -> InferRequest:
    inputs = [
        InferTensor("IN", "INT32", (len(values),), np.array(values, np.int32)),
        InferTensor("DELAY_MS", "INT32", (1,), np.array([delay_ms], np.int32)),
    ]
    return InferRequest("repeat", "", inputs)


def _counts(engine: Engine, name: str) -> tuple[int, int, int, dict[str, int]]:
    """(in flight, successes, failures, failures by reason)."""
    model = engine.models.get(name)
    stats = engine.statistics(name)["model_stats"][0]["inference_stats"]
    return model.inflight, stats["success"]["count"], stats["fail"]["count"], dict(model.statistics.failures)


def test_unary_requests_are_recorded_once_and_released(engine: Engine) -> None:
    _, successes, failures, _ = _counts(engine, "simple")
    asyncio.run(engine.infer(_simple()))
    assert _counts(engine, "simple")[:3] == (0, successes + 1, failures)
    with pytest.raises(InvalidArgument, match="data-type is 'FP32'"):
        asyncio.run(engine.infer(_simple("FP32")))
    assert _counts(engine, "simple")[:3] == (0, successes + 1, failures)  # refused: counted nowhere


def test_an_output_asked_for_twice_is_refused(engine: Engine) -> None:
    request = _simple()
    request.outputs = [RequestedOutput("OUTPUT0"), RequestedOutput("OUTPUT0")]
    with pytest.raises(InvalidArgument, match="output 'OUTPUT0' already exists in request"):
        asyncio.run(engine.infer(request))
    assert engine.models.get("simple").inflight == 0


def test_a_stream_read_to_its_end_is_one_success(engine: Engine) -> None:
    async def read() -> list[int]:
        return [
            int(event.response.outputs[0].data[0])
            async for event in engine.infer_stream(_repeat([4, 5, 6]))
            if event.response is not None
        ]

    _, successes, failures, _ = _counts(engine, "repeat")
    assert asyncio.run(read()) == [4, 5, 6]
    assert _counts(engine, "repeat")[:3] == (0, successes + 1, failures)


def test_a_stream_stopped_early_is_cancelled_and_released(engine: Engine) -> None:
    async def first_only() -> None:
        events = engine.infer_stream(_repeat(list(range(50)), delay_ms=20))
        event = await anext(events)
        assert event.response is not None and not event.final
        assert engine.models.get("repeat").inflight == 1
        await events.aclose()

    _, successes, failures, reasons = _counts(engine, "repeat")
    asyncio.run(first_only())
    inflight, now_successes, now_failures, now_reasons = _counts(engine, "repeat")
    assert (inflight, now_successes, now_failures) == (0, successes, failures + 1)
    assert now_reasons["CANCELED"] == reasons["CANCELED"] + 1


def test_a_stream_closed_at_its_final_event_is_still_one_success(engine: Engine) -> None:
    """An ensemble stops reading a step's stream at the final event when its request failed elsewhere:
    the step's request was answered all the same, and counts."""

    async def until_final() -> None:
        events = engine.infer_stream(_repeat([4]))
        async for event in events:
            if event.final:
                await events.aclose()
                break

    _, successes, failures, _ = _counts(engine, "repeat")
    asyncio.run(until_final())
    assert _counts(engine, "repeat")[:3] == (0, successes + 1, failures)


def test_a_streamed_request_cannot_use_shared_memory(engine: Engine) -> None:
    request = _repeat([1])
    request.inputs[0].shared_memory = SharedMemoryRef("region", 0, 4)

    async def read() -> None:
        async for _ in engine.infer_stream(request):
            pass

    with pytest.raises(InvalidArgument, match="decoupled: its inputs and outputs cannot be in shared memory"):
        asyncio.run(read())
    assert engine.models.get("repeat").inflight == 0


def test_unregistering_regions_in_use_waits_for_the_requests_using_them(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's rule: an unregister while requests use a region succeeds but only marks it; the region
    stays listed (and usable by new requests) until the last of them is answered, then goes."""
    key = f"/nereid_admission_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("held", key, 128)
    try:
        shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.int32)])
        engine.register_system_shared_memory("held", key, 0, 128)
        scheduler = engine.models.get("simple").scheduler
        enqueue = scheduler.enqueue

        async def scenario() -> list[list[str]]:
            started = [asyncio.Event(), asyncio.Event()]
            gates = [asyncio.Event(), asyncio.Event()]
            calls = 0

            async def held_execute(request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
                nonlocal calls
                call, calls = calls, calls + 1
                started[call].set()
                await gates[call].wait()
                answered: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
                enqueue(request, timing, partial(resolve, answered))
                return await answered

            def held_enqueue(request: BackendRequest, timing: RequestTiming | None, done: Done) -> TaskEntry:
                return TaskEntry(held_execute(request, timing), done)

            def listed() -> list[str]:
                return [r.name for r in engine.system_shared_memory_status()]

            monkeypatch.setattr(scheduler, "enqueue", held_enqueue)
            request = _simple()
            for tensor in request.inputs:
                tensor.shared_memory = SharedMemoryRef("held", 0, 64)
            first = asyncio.create_task(engine.infer(request))
            await started[0].wait()
            engine.unregister_system_shared_memory()  # all regions; "held" is in use
            seen = [listed()]
            second = asyncio.create_task(engine.infer(request))  # a marked region still serves new requests
            entered = asyncio.create_task(started[1].wait())
            await asyncio.wait((second, entered), return_when=asyncio.FIRST_COMPLETED)
            if second.done():  # refused: surface why
                entered.cancel()
                await second
            gates[0].set()
            await first
            seen.append(listed())  # the second request still holds it
            gates[1].set()
            response = await second
            assert response.outputs[0].data.tolist() == [[2 * i for i in range(16)]]
            seen.append(listed())
            return seen

        assert asyncio.run(scenario()) == [["held"], ["held"], []]
        assert engine.models.get("simple").inflight == 0
    finally:
        engine.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle)


def _faulty(command: str) -> InferRequest:
    data = np.array([command.encode()], dtype=np.object_)
    return InferRequest("faulty", "", [InferTensor("INPUT0", "BYTES", (1,), data)])


def test_a_python_models_error_response_counts_as_a_success_and_an_exception_as_a_failure(
    engine: Engine,
) -> None:
    """As Triton's Python backend reports them: the model ran and answered, even if with an error."""
    _, successes, failures, reasons = _counts(engine, "faulty")
    executions = engine.statistics("faulty")["model_stats"][0]["execution_count"]
    with pytest.raises(InvalidArgument, match="the model refused this request"):
        asyncio.run(engine.infer(_faulty("error")))
    assert _counts(engine, "faulty") == (0, successes + 1, failures, reasons)
    assert engine.statistics("faulty")["model_stats"][0]["execution_count"] == executions + 1
    with pytest.raises(InternalError, match="the model raised"):
        asyncio.run(engine.infer(_faulty("raise")))
    assert _counts(engine, "faulty") == (
        0,
        successes + 1,
        failures + 1,
        {**reasons, "BACKEND": reasons["BACKEND"] + 1},
    )


def test_a_layout_is_checked_once_per_model_version(engine: Engine) -> None:
    simple = engine.models.get("simple")
    layout = object()  # what a frontend's layout cache hands out: one token per request structure
    request = _simple()
    request.layout = layout
    request.outputs = [RequestedOutput("OUTPUT1")]
    checked = checked_request(simple, request)
    assert layout in simple.checked_layouts
    again = checked_request(simple, request)  # from the table: the same inputs, in the same order
    assert list(again[0]) == list(checked[0]) == ["INPUT1", "INPUT0"]
    assert [o.name for o in again[1]] == [o.name for o in checked[1]] == ["OUTPUT1"]
    assert again[2] == checked[2] == simple.checked_layouts[layout] == ("OUTPUT1",)
    # another model version checks the layout itself, and refuses it
    repeat = engine.models.get("repeat")
    with pytest.raises(InvalidArgument, match="unexpected inference input"):
        checked_request(repeat, request)
    assert layout not in repeat.checked_layouts
    # a refused layout is not kept either
    wrong = _simple("FP32")
    wrong.layout = other = object()
    with pytest.raises(InvalidArgument, match="data-type is 'FP32'"):
        checked_request(simple, wrong)
    assert other not in simple.checked_layouts


def test_the_checked_layouts_are_bounded(engine: Engine) -> None:
    simple = engine.models.get("simple")
    for _ in range(MAX_CHECKED_LAYOUTS + 5):
        request = _simple()
        request.layout = object()
        checked_request(simple, request)
    assert 0 < len(simple.checked_layouts) <= MAX_CHECKED_LAYOUTS


def test_a_layout_whose_inputs_the_backend_sees_reshaped_is_not_kept(engine: Engine) -> None:
    simple = engine.models.get("simple")
    reshaped = copy.copy(simple)
    reshaped.inputs = {name: replace(spec, backend_dims=(4, 4)) for name, spec in simple.inputs.items()}
    reshaped.checked_layouts = {}
    request = _simple()
    request.layout = object()
    for _ in range(2):  # checked, and reshaped, each time
        inputs, _, _ = checked_request(reshaped, request)
        assert inputs["INPUT0"].shape == (1, 4, 4)
    assert not reshaped.checked_layouts
