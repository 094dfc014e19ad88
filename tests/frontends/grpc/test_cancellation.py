"""A client that cancels its RPC cancels the request inside the server: it leaves the queue, its result is dropped."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.backends.base import BackendRequest, BackendResult, Outputs
from nereid.core.engine import Engine
from nereid.frontends.grpc import start_grpc_server
from nereid.scheduling import DefaultScheduler
from nereid.scheduling.default import Job
from nereid.server import build_engine
from nereid.settings import ServerSettings
from nereid.statistics import RequestTiming
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import CORES

SETTINGS = ServerSettings(model_repositories=(EXAMPLES,), grpc_address="127.0.0.1", grpc_port=0)


class GatedInstance:
    """Adds and subtracts like `simple`; the first execution waits for `gate`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.running = threading.Event()
        self.executions = 0

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.executions += 1
        if self.executions == 1:
            self.running.set()
            self.gate.wait(timeout=30)
        results: list[BackendResult] = []
        for request in requests:
            a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
            results.append({"OUTPUT0": a + b, "OUTPUT1": a - b})
        return results

    def close(self) -> None:
        pass


class WatchedScheduler(DefaultScheduler):
    """The default scheduler, telling the test when a request waiting in it was cancelled."""

    def __init__(self, instance: GatedInstance) -> None:
        super().__init__("simple", [instance], inline_limit_s=0.0)
        self.cancelled = asyncio.Event()
        self.requests = 0
        self.second_request = asyncio.Event()

    def _arrived(self) -> None:
        self.requests += 1
        if self.requests == 2:
            self.second_request.set()

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        self._arrived()
        try:
            return await super().execute(request, timing)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    # unary calls queue by callback, and a client that leaves withdraws its job
    def enqueue(
        self, request: BackendRequest, timing: RequestTiming | None, done: Callable[[BackendResult], None]
    ) -> Job:
        self._arrived()
        return super().enqueue(request, timing, done)

    def withdraw(self, job: Job) -> None:
        self.cancelled.set()
        super().withdraw(job)


def _request(request_id: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16]).contents.int_contents.extend([1] * 16)
    return request


async def _with_server(engine: Engine, scenario: object, core: str = "aio") -> None:
    server, port = await start_grpc_server(engine, dataclasses.replace(SETTINGS, grpc=CORES[core]))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await scenario(service_pb2_grpc.GRPCInferenceServiceStub(channel))  # type: ignore[operator]
    finally:
        await server.stop(None)


def _run_with_gated_model(scenario: object, core: str = "aio") -> GatedInstance:
    """Serve the examples with `simple` on a gated instance; run the scenario; return the instance."""
    engine = build_engine(SETTINGS)
    model = engine.models.get("simple")
    original = model.scheduler
    instance = GatedInstance()
    try:

        async def main() -> None:
            model.scheduler = WatchedScheduler(instance)
            try:
                await _with_server(engine, lambda stub: scenario(stub, model.scheduler, instance), core)  # type: ignore[operator]
            finally:
                instance.gate.set()
                model.scheduler.stop()  # finishes the queue: a cancelled job is skipped, not run

        asyncio.run(main())
    finally:
        model.scheduler = original
        engine.shutdown()
    return instance


async def _running(instance: GatedInstance) -> None:
    await asyncio.wait_for(asyncio.to_thread(instance.running.wait, 30), 30)


@pytest.mark.parametrize("core", sorted(CORES))
def test_cancelled_unary_request_leaves_the_queue(core: str) -> None:
    async def scenario(
        stub: service_pb2_grpc.GRPCInferenceServiceStub, scheduler: WatchedScheduler, instance: GatedInstance
    ) -> None:
        first = stub.ModelInfer(_request("first"))
        await _running(instance)  # the only instance is busy with `first`
        second = stub.ModelInfer(_request("second"))
        await asyncio.wait_for(scheduler.second_request.wait(), 30)  # it waits in the queue
        second.cancel()
        await asyncio.wait_for(scheduler.cancelled.wait(), 30)
        assert second.cancelled()
        instance.gate.set()
        response = await first
        assert response.id == "first"

    instance = _run_with_gated_model(scenario, core)
    assert instance.executions == 1  # `second` was dropped without running


def test_cancelled_stream_cancels_its_running_requests() -> None:
    async def scenario(
        stub: service_pb2_grpc.GRPCInferenceServiceStub, scheduler: WatchedScheduler, instance: GatedInstance
    ) -> None:
        first = stub.ModelInfer(_request("first"))
        await _running(instance)

        async def requests() -> AsyncIterator[pb.ModelInferRequest]:
            yield _request("streamed")
            await asyncio.Event().wait()  # keep the stream open until it is cancelled

        stream = stub.ModelStreamInfer(requests())
        reading = asyncio.ensure_future(stream.read())
        await asyncio.wait_for(scheduler.second_request.wait(), 30)
        stream.cancel()
        await asyncio.wait_for(scheduler.cancelled.wait(), 30)
        # the client's read task learns of the cancellation on its own schedule
        await asyncio.wait([reading], timeout=30)
        assert reading.cancelled() or reading.done()
        instance.gate.set()
        assert (await first).id == "first"

    instance = _run_with_gated_model(scenario)
    assert instance.executions == 1
