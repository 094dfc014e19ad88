"""HTTP infer requests answered by callback (no coroutine per request), to a batched model and to one under
the default scheduler: responses, errors, statistics, a client that leaves while its request is queued,
and requests whose tensors are in shared memory regions, held while they are queued."""

from __future__ import annotations

import asyncio
import gc
import shutil
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.utils.shared_memory as shm

from nereid.core.engine import Engine
from nereid.core.queued_infer import QueuedSchedulerInfer
from nereid.frontends.http import HttpFrontend, HttpServer, error_response
from nereid.frontends.http.protocol import DeferredResponse, HttpRequest, HttpResponse, _Connection
from nereid.frontends.http.routes import MAX_KEPT_PATHS
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
    twin = tmp_path / "models" / "gate_default" / "1"  # gate's twin, with gate's model.py
    twin.mkdir()
    shutil.copy(MODELS / "gate" / "1" / "model.py", twin)
    settings = ServerSettings(model_repositories=(tmp_path / "models",), allow_client_shm=True)
    engine = build_engine(settings)
    try:
        yield engine, settings, tmp_path / "models" / "gate" / "release"
    finally:
        for gated in ("gate", "gate_default"):  # a blocked execution lets the instance stop
            (tmp_path / "models" / gated / "release").touch()
        engine.shutdown()


def _infer(value: float, name: str = "IN", model: str = "gate") -> bytes:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": name, "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}}
            ]
        }
    )
    body = header + struct.pack("<f", value)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nhost: x\r\ninference-header-content-length: {len(header)}\r\n"
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


async def _one_executing(core: Engine, settings: ServerSettings) -> tuple[HttpServer, _Transport]:
    """A server, and the transport of a request to `gate` that its instance is executing (held until the
    gate's release file appears)."""
    model = core.models.get("gate", "")
    frontend = HttpFrontend(core, settings)
    server = HttpServer(frontend.dispatch, error_response, 1 << 20)
    running, running_transport = _connect(server)
    running.data_received(_infer(1.0))
    await _until(lambda: model.scheduler.pending() == 0 and model.inflight == 1)
    return server, running_transport


def test_a_client_leaving_withdraws_its_queued_request(engine: tuple[Engine, ServerSettings, Path]) -> None:
    core, settings, release = engine
    model = core.models.get("gate", "")

    async def scenario() -> None:
        server, running_transport = await _one_executing(core, settings)
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


def _infer_in_regions(input_region: str, output_region: str) -> bytes:
    body = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "IN",
                    "datatype": "FP32",
                    "shape": [1, 1],
                    "parameters": {"shared_memory_region": input_region, "shared_memory_byte_size": 4},
                }
            ],
            "outputs": [
                {
                    "name": "OUT",
                    "parameters": {"shared_memory_region": output_region, "shared_memory_byte_size": 4},
                }
            ],
        }
    )
    head = f"POST /v2/models/gate/infer HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.fixture()
def regions() -> Iterator[dict[str, object]]:
    """Two system shared memory regions a client made: "in" holding 2.5, and "out"."""
    made = {
        name: shm.create_shared_memory_region(name, f"/nereid_test_{uuid.uuid4().hex}", 4)
        for name in ("in", "out")
    }
    shm.set_shared_memory_region(made["in"], [np.array([2.5], dtype=np.float32)])
    try:
        yield made
    finally:
        for handle in made.values():
            shm.destroy_shared_memory_region(handle)


def test_a_request_in_shared_memory_is_queued_with_its_regions_held(
    engine: tuple[Engine, ServerSettings, Path], regions: dict[str, object]
) -> None:
    core, settings, release = engine
    model = core.models.get("gate", "")
    registry = core.shared_memory
    for name, handle in regions.items():
        registry.register_system(name, handle._shm_key, 0, 4)  # type: ignore[attr-defined]

    async def scenario() -> None:
        server, running_transport = await _one_executing(core, settings)
        waiting, waiting_transport = _connect(server)
        waiting.data_received(_infer_in_regions("in", "out"))
        assert model.scheduler.pending() == 1  # queued by callback, not awaited
        assert isinstance(model.scheduler._queue[0].timing, QueuedSchedulerInfer)
        # Unregistered while the request is queued: the regions stay until it is answered.
        registry.unregister_system()
        assert sorted(r["name"] for r in registry.system_status()) == ["in", "out"]
        leaving, leaving_transport = _connect(server)
        leaving.data_received(_infer_in_regions("in", "out"))
        leaving.connection_lost(None)  # withdrawn: its hold on the regions goes with it
        assert sorted(r["name"] for r in registry.system_status()) == ["in", "out"]
        release.touch()
        await _until(lambda: len(waiting_transport.written) == 1 and running_transport.written)
        response = waiting_transport.written[0]
        assert response.startswith(b"HTTP/1.1 200 OK\r\n")
        # the output went into its region: the response names it only, as Triton's does
        assert response.endswith(b'"outputs":[{"name":"OUT","datatype":"FP32","shape":[1,1]}]}')
        assert shm.get_contents_as_numpy(regions["out"], np.float32, [1]).tolist() == [2.5]
        assert registry.system_status() == []  # the last user done: both regions gone
        assert leaving_transport.written == [] and model.inflight == 0

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


def test_a_client_leaving_withdraws_its_request_from_the_default_scheduler(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    core, settings, gate_release = engine
    model = core.models.get("gate_default", "")
    release = _release(gate_release)

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        server = HttpServer(frontend.dispatch, error_response, 1 << 20)
        running, running_transport = _connect(server)
        running.data_received(_infer(1.0, model="gate_default"))
        await _until(lambda: model.inflight == 1 and model.scheduler.pending() == 0)  # executing
        held, held_transport = _connect(server)
        held.data_received(_infer(2.0, model="gate_default"))  # held ready behind the running one
        waiting, waiting_transport = _connect(server)
        waiting.data_received(_infer(3.0, model="gate_default"))  # waits for the instance
        assert model.scheduler.pending() == 2 and model.inflight == 3
        held.connection_lost(None)
        waiting.connection_lost(None)
        assert model.statistics.failures["CANCELED"] == 2 and model.inflight == 1
        release.touch()
        await _until(lambda: running_transport.written)
        response = running_transport.written[0]
        assert response.startswith(b"HTTP/1.1 200 OK\r\n")
        assert response.endswith(b'"data":[1.0]}]}')
        assert held_transport.written == [] and waiting_transport.written == []
        await _until(lambda: model.scheduler.pending() == 0)  # the withdrawn ones were skipped
        stats = core.statistics("gate_default")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 1
        assert stats["inference_stats"]["fail"]["count"] == 2
        assert stats["execution_count"] == 1 and model.inflight == 0

    asyncio.run(scenario())


def test_the_default_scheduler_answers_by_callback_and_counts_as_the_awaited_path(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    core, settings, gate_release = engine
    _release(gate_release).touch()

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        request = _http_request(_infer(4.0, model="gate_default"))
        now = await _answered_by_callback(frontend, request)
        awaited = await frontend.handle(request)
        assert (now.status, now.body) == (awaited.status, awaited.body)
        assert now.body.endswith(b'"data":[4.0]}]}')

    asyncio.run(scenario())
    stats = core.statistics("gate_default")["model_stats"][0]
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 2 and stats["execution_count"] == 2
    assert inference["queue"]["count"] == inference["compute_infer"]["count"] == 2
    assert inference["compute_infer"]["ns"] > 0


def test_a_worker_process_model_fails_by_callback_as_on_the_awaited_path(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    core, settings, _ = engine

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        for value, status in ((3.0, 200), (-1.0, 500)):
            request = _http_request(_infer(value, model="checked"))
            now = await _answered_by_callback(frontend, request)
            awaited = await frontend.handle(request)
            assert (now.status, now.body) == (awaited.status, awaited.body)
            assert now.status == status
        assert b"negative input" in now.body

    asyncio.run(scenario())
    inference = core.statistics("checked")["model_stats"][0]["inference_stats"]
    assert inference["success"]["count"] == 2 and inference["fail"]["count"] == 2


async def _answered_by_callback(frontend: HttpFrontend, request: HttpRequest) -> HttpResponse:
    deferred = frontend.dispatch(request)
    assert isinstance(deferred, DeferredResponse)
    answered: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()
    deferred.then(answered.set_result)
    return await answered


def _release(gate_release: Path) -> Path:
    """The file whose appearance lets gate_default's executions go on (beside gate's)."""
    return gate_release.parent.parent / "gate_default" / "release"


def _http_request(raw: bytes) -> HttpRequest:
    head, _, payload = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return HttpRequest("POST", lines[0].split(" ")[1], "", headers, payload)


def test_a_model_run_on_the_event_loop_is_answered_before_dispatch_returns(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    core, settings, _ = engine
    # Whether the model counts as fast comes from its first execution's time; a loaded host must not decide.
    core.models.get("echo").scheduler.pool._inline_limit_s = 10.0

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        server = HttpServer(frontend.dispatch, error_response, 1 << 20)
        connection, transport = _connect(server)
        raw = _infer(5.0, name="INPUT0", model="echo")
        connection.data_received(raw)  # the first execution is measured on the instance's thread
        await _until(lambda: transport.written)
        connection.data_received(raw)  # measured fast: runs inline, answered at once
        assert len(transport.written) == 2
        awaited = await frontend.handle(_http_request(raw))
        assert transport.written[1].endswith(awaited.body)
        assert b'"parameters":' in awaited.body and awaited.body.endswith(b'"data":[5.0]}]}')

    asyncio.run(scenario())
    inference = core.statistics("echo")["model_stats"][0]["inference_stats"]
    assert inference["success"]["count"] == 3


def test_infer_paths_are_matched_once_and_kept_and_an_unrouted_one_is_not_found(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    core, settings, gate_release = engine
    gate_release.touch()

    async def scenario() -> None:
        frontend = HttpFrontend(core, settings)
        for path in ("/v2/models/gate/infer", "/v2/models/gate/versions/1/infer") * 2:
            request = _http_request(_infer(2.0))
            request.path = path
            now = await _answered_by_callback(frontend, request)
            assert now.status == 200 and now.body.endswith(b'"data":[2.0]}]}')
        kept = frontend.routes._kept
        assert {path: match.params for path, match in kept.items()} == {
            "/v2/models/gate/infer": {"model": "gate"},
            "/v2/models/gate/versions/1/infer": {"model": "gate", "version": "1"},
        }
        odd = _http_request(_infer(2.0))
        odd.path = "/v2/models/gate/x/infer"  # no route: answered at once
        now = frontend.dispatch(odd)
        assert isinstance(now, HttpResponse) and now.status == 404
        assert (await frontend.handle(odd)).status == 404
        assert kept[odd.path].routes == {}
        for index in range(MAX_KEPT_PATHS + 5):  # unknown models: refused, their paths kept, bounded
            missing = _http_request(_infer(2.0))
            missing.path = f"/v2/models/missing{index}/infer"
            assert frontend.dispatch(missing).status == 404  # type: ignore[union-attr]
        assert 0 < len(kept) <= MAX_KEPT_PATHS

    asyncio.run(scenario())


def test_an_answered_request_leaves_no_reference_cycle_behind(
    engine: tuple[Engine, ServerSettings, Path],
) -> None:
    # A queued request is its own admission, which its scheduler's entry holds as its timing: once it is
    # answered nothing of it may wait for the garbage collector (a cycle per request costs more CPU than
    # the rest of its way through the engine).
    core, settings, gate_release = engine
    gate_release.touch()
    _release(gate_release).touch()
    core.models.get("echo").scheduler.pool._inline_limit_s = 10.0

    async def scenario() -> list[object]:
        frontend = HttpFrontend(core, settings)
        await _answered_by_callback(frontend, _http_request(_infer(1.0, name="INPUT0", model="echo")))
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
        try:
            for raw in (
                _infer(1.0),
                _infer(1.0, model="gate_default"),
                _infer(1.0, name="INPUT0", model="echo"),
            ):
                assert (await _answered_by_callback(frontend, _http_request(raw))).status == 200
            gc.collect()
            return [o for o in gc.garbage if isinstance(o, QueuedSchedulerInfer)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    assert asyncio.run(scenario()) == []
