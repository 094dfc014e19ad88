"""ModelInfer calls to a batched model, answered by callback (on the native core with no Task per call):
responses, errors as on the awaited path, statistics, a client that cancels while its request is queued,
and a server that stops with requests in flight."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.core.engine import Engine
from nereid.frontends.grpc.native import NativeServer
from nereid.server import build_engine
from tests.frontends.grpc.conftest import CORES, LoopThread, core_settings, serving

MODELS = Path(__file__).parent.parent / "queued_models"


@dataclass
class Served:
    engine: Engine
    loop: LoopThread
    server: Any
    stub: service_pb2_grpc.GRPCInferenceServiceStub
    release: Path
    core: str


@pytest.fixture(params=sorted(CORES))
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    shutil.copytree(MODELS, tmp_path / "models")
    release = tmp_path / "models" / "gate" / "release"
    settings = core_settings(tmp_path / "models", request.param)
    engine = build_engine(settings)
    try:
        with serving(engine, settings) as running:
            try:
                yield Served(engine, running.loop, running.server, running.stub, release, request.param)
            finally:
                release.touch()  # a blocked execution lets the instance stop
    finally:
        release.touch()
        engine.shutdown()


def _request(
    value: float, name: str = "IN", model: str = "gate", request_id: str = ""
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model, id=request_id)
    message.inputs.add(name=name, datatype="FP32", shape=[1, 1])
    message.raw_input_contents.append(np.float32(value).tobytes())
    return message


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


def _out(response: pb.ModelInferResponse) -> float:
    return float(np.frombuffer(response.raw_output_contents[0], dtype=np.float32)[0])


def test_the_native_core_serves_model_infer_itself(served: Served) -> None:
    assert isinstance(served.server, NativeServer) == (served.core == "native")
    served.release.touch()
    response = served.stub.ModelInfer(_request(3.0, request_id="r1"))
    assert (response.model_name, response.model_version, response.id) == ("gate", "1", "r1")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [("OUT", "FP32", [1, 1])]
    assert _out(response) == 3.0
    stats = served.engine.statistics("gate")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 1


def test_errors_carry_the_engine_s_status_and_words(served: Served) -> None:
    served.release.touch()
    cases = [
        (_request(1.0, model="missing"), grpc.StatusCode.NOT_FOUND),
        (_request(1.0, name="NOPE"), grpc.StatusCode.INVALID_ARGUMENT),
    ]
    bad_size = _request(1.0)
    bad_size.raw_input_contents[0] = b"\0" * 3
    cases.append((bad_size, grpc.StatusCode.INVALID_ARGUMENT))
    for message, code in cases:
        with pytest.raises(grpc.RpcError) as caught:
            served.stub.ModelInfer(message)
        assert caught.value.code() == code
        assert message.model_name in caught.value.details() or "NOPE" in caught.value.details()


@pytest.mark.parametrize("served", ["native"], indirect=True)  # the native core's own check of its limit
def test_a_response_over_the_send_limit_is_refused(served: Served) -> None:
    served.release.touch()
    served.server._send_limit = 8  # a response is more
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.ModelInfer(_request(1.0))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_backend_s_response_parameters_reach_the_client(served: Served) -> None:
    from nereid.backends.identity import RESPONSE_PARAMETERS

    response = served.stub.ModelInfer(_request(2.0, name="INPUT0", model="echo"))
    given = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
    assert given == RESPONSE_PARAMETERS
    served.release.touch()
    assert not served.stub.ModelInfer(_request(1.0)).parameters  # a model.py's plain outputs: none


def test_a_client_cancelling_withdraws_its_queued_request(served: Served) -> None:
    model = served.engine.models.get("gate", "")
    running = served.stub.ModelInfer.future(_request(1.0, request_id="running"))
    _until(lambda: model.scheduler.pending() == 0 and model.inflight == 1)  # executing
    leaving = served.stub.ModelInfer.future(_request(2.0, request_id="leaving"))
    _until(lambda: model.scheduler.pending() == 1)  # queued behind the running batch
    if served.core == "native":  # both calls wait in the server's table, with no Task
        calls = list(served.server._calls.values())  # type: ignore[attr-defined]
        assert len(calls) == 2 and all(type(c).__name__ == "_InferCall" and c.task is None for c in calls)
    leaving.cancel()
    _until(lambda: model.statistics.failures["CANCELED"] == 1)
    assert model.scheduler.pending() == 0
    served.release.touch()
    assert _out(running.result(timeout=30)) == 1.0
    assert leaving.cancelled()
    stats = served.engine.statistics("gate")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 1
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert stats["execution_count"] == 1
    _until(lambda: model.inflight == 0)


def _running_and_queued(served: Served) -> tuple[grpc.Future, grpc.Future]:
    """Two calls in flight: one executing (held by the gate), one queued behind it."""
    model = served.engine.models.get("gate", "")
    running = served.stub.ModelInfer.future(_request(1.0))
    _until(lambda: model.scheduler.pending() == 0 and model.inflight == 1)
    queued = served.stub.ModelInfer.future(_request(2.0))
    _until(lambda: model.scheduler.pending() == 1)
    return running, queued


class _RecordingFront:
    """The native front, keeping the answers handed to it."""

    def __init__(self, front: Any) -> None:
        self._front = front
        self.answered: list[bytes] = []

    def respond(self, call_id: int, data: bytes, *args: Any, **kwargs: Any) -> bool:
        self.answered.append(data)
        return bool(self._front.respond(call_id, data, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._front, name)


def test_requests_in_flight_are_answered_within_the_grace_period(served: Served) -> None:
    model = served.engine.models.get("gate", "")
    running, queued = _running_and_queued(served)
    front = None
    if served.core == "native":
        front = served.server._front = _RecordingFront(served.server._front)
    stopping = served.loop.run(_start_stop(served.server, 30))
    served.release.touch()
    stopping.result(timeout=30)
    stats = served.engine.statistics("gate")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 2 and model.inflight == 0
    if front is None:
        assert _out(running.result(timeout=30)) == 1.0
        assert _out(queued.result(timeout=30)) == 2.0
    else:
        # Both answers reach the front before it closes; whether the client reads them before the
        # front's connections close is up to the front, so only the hand-over is checked here.
        answers = sorted(_out(pb.ModelInferResponse.FromString(data)) for data in front.answered)
        assert answers == [1.0, 2.0]
        for call in (running, queued):
            call.exception(timeout=30)  # ended, one way or the other


def test_requests_in_flight_are_withdrawn_by_a_stop_without_grace(served: Served) -> None:
    model = served.engine.models.get("gate", "")
    running, queued = _running_and_queued(served)
    served.loop.run(served.server.stop(None))
    assert model.scheduler.pending() == 0
    assert model.statistics.failures["CANCELED"] == 2  # the running request's result is dropped too
    for call in (running, queued):
        with pytest.raises(grpc.RpcError):
            call.result(timeout=30)
    served.release.touch()
    _until(lambda: model.inflight == 0)


async def _start_stop(server: object, grace: float) -> object:
    import asyncio

    stopping = asyncio.ensure_future(server.stop(grace))  # type: ignore[attr-defined]
    await asyncio.sleep(0)  # the server refuses new calls from here on
    return _Wrapped(stopping)


class _Wrapped:
    """A future of the loop thread, waited on from the test's thread."""

    def __init__(self, future: object) -> None:
        import concurrent.futures

        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.add_done_callback(lambda f: self._done.set_result(None))  # type: ignore[attr-defined]

    def result(self, timeout: float) -> None:
        self._done.result(timeout)


def test_a_pygrpc_native_without_the_internals_serves_every_call_its_own_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pygrpc_native.aio

    from nereid.frontends.grpc import native

    monkeypatch.setattr(native, "_HOOKS", (*native._HOOKS, "_internals_of_another_version"))
    server = native.native_server(None)  # type: ignore[arg-type]
    assert type(server) is pygrpc_native.aio.Server


def test_queued_calls_count_as_in_flight_until_answered(served: Served) -> None:
    """What a stopping server waits for: on the native core a queued call has no coroutine, so the call
    table's entries are counted as they come and go."""
    model = served.engine.models.get("gate", "")
    calls = [served.stub.ModelInfer.future(_request(0.0, request_id="running"))]
    _until(lambda: model.scheduler.pending() == 0 and model.inflight == 1)  # executing
    calls.append(served.stub.ModelInfer.future(_request(1.0, request_id="queued")))
    _until(lambda: model.scheduler.pending() == 1)  # queued behind it
    if served.core == "native":
        assert served.server._servicer.calls.active == 2  # type: ignore[attr-defined]
    served.release.touch()
    assert sorted(_out(c.result(timeout=30)) for c in calls) == [0.0, 1.0]
    if served.core == "native":
        _until(lambda: served.server._servicer.calls.active == 0)  # type: ignore[attr-defined]
