"""What a stopping server waits for once its endpoints are closed: models' requests in flight and the
sequences started before the signal, reported in Triton's words until none is left or time is up."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from nereid.exit_countdown import ExitCountdown
from nereid.server import drain_models, log_inflight


class _Model:
    def __init__(self, name: str, left: int) -> None:
        self.name = name
        self.version = 1
        self.left = left

    def outstanding(self) -> int:
        return self.left


def _engine(*models: _Model) -> SimpleNamespace:
    return SimpleNamespace(models=SimpleNamespace(loaded=lambda: list(models)))


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_the_drain_waits_until_no_model_has_work_left(caplog: pytest.LogCaptureFixture) -> None:
    sequences = _Model("seq", 2)
    idle = _Model("idle", 0)
    engine = _engine(sequences, idle)

    async def run() -> None:
        drain = asyncio.create_task(
            drain_models(engine, ExitCountdown(600), poll_s=0, report_s=0)  # type: ignore[arg-type]
        )
        await asyncio.sleep(0)  # one look: two sequences wait, reported
        assert not drain.done()
        sequences.left = 1
        await asyncio.sleep(0)
        assert not drain.done()
        sequences.left = 0
        await drain

    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(run())
    models = [m for m in _messages(caplog) if m.startswith("Model ")]
    assert models == [
        "Model 'seq' (version 1) has 2 in-flight inferences",
        "Model 'seq' (version 1) has 1 in-flight inferences",
    ]
    assert sum(m.startswith("Timeout ") for m in _messages(caplog)) == 2


def test_the_drain_ends_at_the_deadline_whatever_is_left(caplog: pytest.LogCaptureFixture) -> None:
    engine = _engine(_Model("hung", 1))
    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(drain_models(engine, ExitCountdown(0), poll_s=0, report_s=0))  # type: ignore[arg-type]
    assert _messages(caplog) == []


def test_the_signal_report_names_busy_models_only(caplog: pytest.LogCaptureFixture) -> None:
    engine = _engine(_Model("busy", 3), _Model("idle", 0))
    with caplog.at_level(logging.INFO, logger="nereid"):
        assert log_inflight(engine) == 1  # type: ignore[arg-type]
    assert _messages(caplog) == ["Model 'busy' (version 1) has 3 in-flight inferences"]


def test_the_countdown_never_names_a_number_twice(caplog: pytest.LogCaptureFixture) -> None:
    """Each stage of the stop goes on from the number the one before reached: 'Timeout 30' is said once."""
    countdown = ExitCountdown(30)
    with caplog.at_level(logging.INFO, logger="nereid"):
        countdown.report("Found 1 HTTP service connections")
        countdown.report("Found 0 model versions that have in-flight inferences")
    assert _messages(caplog) == [
        "Timeout 30: Found 1 HTTP service connections",
        "Timeout 29: Found 0 model versions that have in-flight inferences",
    ]
    short = ExitCountdown(1)
    short.report("a")
    short.report("b")
    assert short.left == 0


def test_the_drain_says_once_when_nothing_is_in_flight(caplog: pytest.LogCaptureFixture) -> None:
    engine = _engine(_Model("idle", 0))
    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(drain_models(engine, ExitCountdown(30), poll_s=0, report_s=0))  # type: ignore[arg-type]
    assert _messages(caplog) == ["Timeout 30: Found 0 model versions that have in-flight inferences"]
