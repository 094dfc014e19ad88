"""The inference calls a stopping server waits for: counted while they run, reported once a second."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.errors import Unavailable
from nereid.exit_countdown import ExitCountdown
from nereid.frontends.grpc.inflight import InferCalls, report_while_draining
from nereid.frontends.grpc.servicer import InferenceServicer


class _Engine:
    """Holds every inference until `release` is set, then refuses it."""

    def __init__(self) -> None:
        self.tracer = SimpleNamespace(active=False)
        self.release = asyncio.Event()

    def infer_queued(self, request: Any) -> _Held:
        return _Held(self.release)


class _Held:
    """A queued request, refused once its engine's `release` is set."""

    def __init__(self, release: asyncio.Event) -> None:
        self._release = release
        self._task: asyncio.Task[None] | None = None

    def then(self, callback: Callable[[Any], None]) -> None:
        async def refused() -> None:
            await self._release.wait()
            callback(Unavailable("refused once released"))

        self._task = asyncio.ensure_future(refused())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


class _Context:
    def __init__(self) -> None:
        self.aborted: list[tuple[grpc.StatusCode, str]] = []

    def invocation_metadata(self) -> tuple:
        return ()

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        self.aborted.append((code, message))


_REQUEST = pb.ModelInferRequest(model_name="m")


def test_unary_and_stream_calls_are_counted_until_they_finish() -> None:
    async def run() -> None:
        engine = _Engine()
        calls = InferCalls()
        servicer = InferenceServicer(engine, calls=calls)  # type: ignore[arg-type]
        context = _Context()
        unary = [asyncio.create_task(servicer.ModelInfer(_REQUEST, context)) for _ in range(2)]
        stream_ends = asyncio.Event()

        async def requests() -> AsyncIterator[pb.ModelInferRequest]:
            await stream_ends.wait()
            return
            yield _REQUEST  # an async generator that sends nothing

        async def read_stream() -> list[pb.ModelStreamInferResponse]:
            return [r async for r in servicer.ModelStreamInfer(requests(), context)]

        stream = asyncio.create_task(read_stream())
        for _ in range(3):
            await asyncio.sleep(0)  # each call starts
        assert calls.active == 3
        engine.release.set()
        await asyncio.gather(*unary)
        assert calls.active == 1  # the stream is still open
        assert [code for code, _ in context.aborted] == [grpc.StatusCode.UNAVAILABLE] * 2
        stream_ends.set()
        assert await stream == []
        assert calls.active == 0

    asyncio.run(run())


def test_the_drain_reports_the_calls_left_each_period(caplog: pytest.LogCaptureFixture) -> None:
    calls = InferCalls()
    calls.active = 2

    async def run() -> None:
        reporter = asyncio.create_task(report_while_draining(calls, ExitCountdown(5), period_s=0))
        await asyncio.sleep(0)  # first report: 2 left
        calls.active = 1
        await asyncio.sleep(0)  # second: 1 left
        calls.active = 0
        await reporter  # none left: it ends without another line

    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [
        "Timeout 5: Found 2 gRPC service connections and inference handlers",
        "Timeout 4: Found 1 gRPC service connections and inference handlers",
    ]


def test_the_drain_report_stops_at_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    calls = InferCalls()
    calls.active = 1
    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(report_while_draining(calls, ExitCountdown(2), period_s=0))
    assert [r.getMessage() for r in caplog.records] == [
        "Timeout 2: Found 1 gRPC service connections and inference handlers",
        "Timeout 1: Found 1 gRPC service connections and inference handlers",
    ]
