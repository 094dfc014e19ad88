"""HTTP infer requests to a batched model, answered by callback (no coroutine per request): responses,
errors, statistics and a client that leaves while its request is queued."""

from __future__ import annotations

import asyncio
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from nereid.engine import Engine
from nereid.frontends.http import HttpFrontend, HttpServer, error_response
from nereid.frontends.http.protocol import DeferredResponse, HttpRequest, _Connection
from nereid.server import build_engine
from nereid.settings import ServerSettings

MODELS = Path(__file__).parent / "queued_models"


class _Transport(asyncio.Transport):
    """Keeps what the connection writes (nothing here makes it pause, close or write in pieces)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[tuple[Engine, ServerSettings, Path]]:
    shutil.copytree(MODELS, tmp_path / "models")
    settings = ServerSettings(model_repositories=(tmp_path / "models",))
    engine = build_engine(settings)
    try:
        yield engine, settings, tmp_path / "models" / "gate" / "release"
    finally:
        (tmp_path / "models" / "gate" / "release").touch()  # a blocked execution lets the instance stop
        engine.shutdown()


def _infer(value: float, name: str = "IN") -> bytes:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": name, "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}}
            ]
        }
    )
    body = header + struct.pack("<f", value)
    head = (
        f"POST /v2/models/gate/infer HTTP/1.1\r\nhost: x\r\ninference-header-content-length: {len(header)}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _connect(server: HttpServer) -> tuple[_Connection, _Transport]:
    connection, transport = _Connection(server), _Transport()
    connection.connection_made(transport)
    return connection, transport


async def _until(condition: object, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.005)


def test_a_client_leaving_withdraws_its_queued_request(engine: tuple[Engine, ServerSettings, Path]) -> None:
    core, settings, release = engine
    model = core.models.get("gate", "")

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        server = HttpServer(frontend.dispatch, error_response, 1 << 20)
        running, running_transport = _connect(server)
        running.data_received(_infer(1.0))
        await _until(lambda: model.scheduler.pending() == 0 and model.inflight == 1)  # executing
        leaving, leaving_transport = _connect(server)
        leaving.data_received(_infer(2.0))
        assert model.scheduler.pending() == 1  # queued behind the running batch
        leaving.connection_lost(None)
        assert model.scheduler.pending() == 0
        await _until(lambda: model.statistics.failures["CANCELED"] == 1)
        release.touch()
        await _until(lambda: running_transport.written)
        response = running_transport.written[0]
        assert response.startswith(b"HTTP/1.1 200 OK\r\n")
        assert response.endswith(b'"data":[1.0]}]}')
        assert leaving_transport.written == []
        stats = core.statistics("gate")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 1
        assert stats["inference_stats"]["fail"]["count"] == 1
        assert stats["execution_count"] == 1 and model.inflight == 0

    asyncio.run(scenario())


def test_errors_read_as_on_the_awaited_path(engine: tuple[Engine, ServerSettings, Path]) -> None:
    core, settings, release = engine
    release.touch()

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        for body, path in ((_infer(1.0, name="NOPE"), "gate"), (_infer(1.0), "missing")):
            raw = body.replace(b"/models/gate/", f"/models/{path}/".encode())
            head, _, payload = raw.partition(b"\r\n\r\n")
            headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
            request = HttpRequest("POST", f"/v2/models/{path}/infer", "", headers, payload)
            now = frontend.dispatch(request)
            assert not isinstance(now, DeferredResponse)
            awaited = await frontend.handle(request)
            assert (now.status, now.body) == (awaited.status, awaited.body)  # type: ignore[union-attr]
            assert now.status in (400, 404)  # type: ignore[union-attr]

    asyncio.run(scenario())
