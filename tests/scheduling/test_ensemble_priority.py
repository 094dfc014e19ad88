"""An ensemble's steps carry the ensemble request's priority, as in Triton: through the engine, a step
queued behind a busy instance overtakes a default-priority request that was queued before it."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import numpy as np

from nereid.core.engine import Engine
from nereid.types import InferRequest, InferTensor
from tests.backends.serving import serving

MODELS = Path(__file__).parent / "priority_models"


def _request(model: str, x: float, gate: Path | None = None, priority: int = 0) -> InferRequest:
    inputs = [InferTensor("X", "FP32", (1, 1), np.array([[x]], np.float32))]
    if gate is not None:
        inputs.append(InferTensor("GATE", "BYTES", (1, 1), np.array([[str(gate).encode()]], np.object_)))
    return InferRequest(model, "", inputs, priority=priority)


async def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def _pending(engine: Engine, name: str) -> int:
    return next(m.pending for m in engine.model_metrics() if m.name == name)


async def _orders(engine: Engine, gate: Path) -> tuple[int, int]:
    async def order(request: InferRequest) -> int:
        response = await engine.infer(request)
        return int(response.outputs[0].data[0, 0])

    held = asyncio.ensure_future(order(_request("ordered", 0, gate)))
    await _until(Path(str(gate) + ".started").exists, "the gated execution to start")
    # With the instance held, the next request may wait in its pipeline; those after it queue.
    filler = asyncio.ensure_future(order(_request("ordered", 1)))
    low = asyncio.ensure_future(order(_request("ordered", 2)))  # the default level, 2
    await _until(lambda: _pending(engine, "ordered") >= 1, "a default-priority request to queue")
    queued = _pending(engine, "ordered")
    high = asyncio.ensure_future(order(_request("pipeline", 3, priority=1)))
    await _until(lambda: _pending(engine, "ordered") == queued + 1, "the ensemble's step to queue")
    gate.touch()
    _, _, low_order, high_order = await asyncio.wait_for(asyncio.gather(held, filler, low, high), 60)
    return low_order, high_order


def test_an_ensemble_step_runs_at_the_ensemble_requests_priority(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(MODELS, repository)
    with serving(repository, backend_config={"python": {"stub-timeout-seconds": "5"}}) as engine:
        low_order, high_order = asyncio.run(_orders(engine, tmp_path / "gate"))
    assert high_order < low_order, (high_order, low_order)
