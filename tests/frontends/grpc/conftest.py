"""The gRPC frontend in process: a server on port 0, on an event loop of its own thread, once on each core
(pygrpc-native and grpc.aio)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from tritonclient.grpc import service_pb2_grpc

from nereid.core.engine import Engine
from nereid.frontends.grpc import start_grpc_server
from nereid.server import build_engine
from nereid.settings import GrpcOptions, ServerSettings
from tests.conftest import EXAMPLES

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread; `run` executes a coroutine there and waits for it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@dataclass
class InProcessServer:
    engine: Engine
    target: str
    stub: service_pb2_grpc.GRPCInferenceServiceStub
    channel: grpc.Channel
    core: str


# core -> its options: the native core refuses deflate requests; grpc.aio takes both compressions, as
# tritonserver does.
CORES = {
    "native": GrpcOptions(core="native"),
    "aio": GrpcOptions(core="aio"),
}


@dataclass
class Serving:
    server: Any  # the started gRPC server (either core)
    loop: LoopThread  # the event loop it runs on
    target: str
    channel: grpc.Channel
    stub: service_pb2_grpc.GRPCInferenceServiceStub


@contextmanager
def serving(engine: Engine, settings: ServerSettings) -> Iterator[Serving]:
    """The engine's gRPC server for `settings` (port 0) on a loop thread of its own, and a stub on it;
    stopped on exit."""
    loop = LoopThread()
    try:
        server, port = loop.run(start_grpc_server(engine, settings))
        target = f"127.0.0.1:{port}"
        try:
            with grpc.insecure_channel(target) as channel:
                yield Serving(
                    server, loop, target, channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)
                )
        finally:
            loop.run(server.stop(None))
    finally:
        loop.close()


def core_settings(repository: Path, core: str) -> ServerSettings:
    """Settings that serve `repository` over gRPC on `core` (port 0 of 127.0.0.1)."""
    return ServerSettings(
        model_repositories=(repository,), grpc_address="127.0.0.1", grpc_port=0, grpc=CORES[core]
    )


@pytest.fixture(scope="module", params=sorted(CORES))
def grpc_server(request: pytest.FixtureRequest) -> Iterator[InProcessServer]:
    settings = core_settings(EXAMPLES, request.param)
    engine = build_engine(settings)
    try:
        with serving(engine, settings) as served:
            yield InProcessServer(engine, served.target, served.stub, served.channel, request.param)
    finally:
        engine.shutdown()


@contextmanager
def served_stub(settings: ServerSettings) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """An engine and its gRPC server for `settings` (port 0), and a stub on it; all stopped on exit."""
    engine = build_engine(settings)
    try:
        with serving(engine, settings) as served:
            yield served.stub
    finally:
        engine.shutdown()
