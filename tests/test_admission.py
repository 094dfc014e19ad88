"""The admission path that unary and streamed requests share: counted in flight until answered, refused
requests counted nowhere, each admitted request recorded once (a stream stopped early as CANCELED)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nereid.engine import Engine
from nereid.errors import InvalidArgument
from nereid.shared_memory import SharedMemoryRef
from nereid.types import InferRequest, InferTensor
from tests.backends.serving import serving
from tests.conftest import EXAMPLES

PIPELINES = Path(__file__).parent / "pipelines" / "models"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("admission")
    shutil.copytree(EXAMPLES / "simple", root / "simple")
    shutil.copytree(PIPELINES / "repeat", root / "repeat")
    with serving(root, backend_config={"python": {"stub-timeout-seconds": "5"}}) as engine:
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


def test_a_streamed_request_cannot_use_shared_memory(engine: Engine) -> None:
    request = _repeat([1])
    request.inputs[0].shared_memory = SharedMemoryRef("region", 0, 4)

    async def read() -> None:
        async for _ in engine.infer_stream(request):
            pass

    with pytest.raises(InvalidArgument, match="decoupled: its inputs and outputs cannot be in shared memory"):
        asyncio.run(read())
    assert engine.models.get("repeat").inflight == 0
