"""Decoupled models and BLS against a `nereid` process: streams over gRPC and HTTP, cancellation, and
Python models calling other models through the server."""

from __future__ import annotations

import http.client
import json
import queue
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT, RunningServer, execution_mode_flags, start_nereid, stop

MODELS = ROOT / "tests" / "pipelines" / "models"
ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"
DEADLINE_S = 20.0


def pipeline_repository(root: Path) -> Path:
    """The test models, and add_sub with dynamic batching: the callee of the BLS models."""
    shutil.copytree(MODELS, root)
    shutil.copytree(ADD_SUB, root / "add_sub")
    with (root / "add_sub" / "config.pbtxt").open("a") as config:
        config.write("dynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("decoupled_bls")
    running = start_nereid(
        pipeline_repository(base / "repository"),
        base / "nereid.log",
        *execution_mode_flags(python_execution_mode),
        grpc=True,
    )
    try:
        yield running
    finally:
        stop(running.process)


def repeat_inputs(module: Any, values: list[int], delay_ms: int = 0) -> list[Any]:
    data = module.InferInput("IN", [len(values)], "INT32")
    data.set_data_from_numpy(np.array(values, dtype=np.int32))
    delay = module.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([delay_ms], dtype=np.int32))
    return [data, delay]


class Stream:
    """A gRPC stream whose responses (or errors) land in a queue."""

    def __init__(self, server: RunningServer) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.received: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(lambda result, error: self.received.put((result, error)))

    def next(self) -> tuple[Any, Any]:
        return self.received.get(timeout=DEADLINE_S)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


@pytest.fixture
def stream(server: RunningServer) -> Iterator[Stream]:
    opened = Stream(server)
    try:
        yield opened
    finally:
        opened.close()


def _final(result: Any) -> bool:
    return bool(result.get_response(as_json=True)["parameters"]["triton_final_response"]["bool_param"])


def wait_for_log(server: RunningServer, pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        match = re.search(pattern, server.log())
        if match is not None:
            return match
        time.sleep(0.05)
    raise AssertionError(f"no log line matches {pattern!r}:\n{server.log()[-3000:]}")


# decoupled models over gRPC
@pytest.mark.parametrize("inline", [False, True], ids=["from_a_thread", "from_execute"])
def test_grpc_stream_carries_every_response(stream: Stream, inline: bool) -> None:
    values = [5, 8, 13, 21, 34]
    stream.client.async_stream_infer(
        "repeat",
        repeat_inputs(grpcclient, values),
        request_id="r1",
        parameters={"inline": inline},
        enable_empty_final_response=True,
    )
    got = []
    for index, value in enumerate(values):
        result, error = stream.next()
        assert error is None
        assert result.get_response().id == "r1" and not _final(result)
        assert result.as_numpy("OUT").tolist() == [value] and result.as_numpy("IDX").tolist() == [index]
        got.append(value)
    result, error = stream.next()  # the final flag alone, sent because the request asked for it
    assert error is None and _final(result) and result.as_numpy("OUT") is None
    assert got == values


def test_grpc_stream_zero_responses_and_errors_in_between(stream: Stream) -> None:
    stream.client.async_stream_infer(
        "repeat", repeat_inputs(grpcclient, []), request_id="zero", enable_empty_final_response=True
    )
    result, error = stream.next()
    assert error is None and _final(result) and result.get_response().id == "zero"
    stream.client.async_stream_infer("repeat", repeat_inputs(grpcclient, [1, -2, 3]), request_id="mixed")
    outcomes = [stream.next() for _ in range(3)]
    assert outcomes[0][0].as_numpy("OUT").tolist() == [1]
    assert outcomes[1][1] is not None and "negative value -2 at index 1" in outcomes[1][1].message()
    assert outcomes[2][0].as_numpy("OUT").tolist() == [3]
    # without enable_empty_final_response, the flags-only final response is not sent: nothing more came
    stream.client.async_stream_infer("repeat", repeat_inputs(grpcclient, [9]), request_id="after")
    result, error = stream.next()
    assert error is None and result.get_response().id == "after"


def test_a_failing_execute_ends_the_stream_with_its_error(stream: Stream) -> None:
    stream.client.async_stream_infer("repeat", repeat_inputs(grpcclient, [1, 2], -1), request_id="raise")
    result, error = stream.next()
    assert result is None and "ValueError: DELAY_MS must not be negative" in error.message()
    stream.client.async_stream_infer("repeat", repeat_inputs(grpcclient, [3]), request_id="after")
    result, error = stream.next()  # the stream and the model go on
    assert error is None and result.as_numpy("OUT").tolist() == [3]


def test_model_infer_refuses_decoupled_models(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(
        InferenceServerException, match="ModelInfer RPC doesn't support models with decoupled"
    ):
        client.infer("repeat", repeat_inputs(grpcclient, [1]))
    client.close()


def test_cancelling_a_grpc_stream_stops_the_model(server: RunningServer) -> None:
    stream = Stream(server)
    try:
        stream.client.async_stream_infer("repeat", repeat_inputs(grpcclient, list(range(1000)), 20))
        for _ in range(2):
            result, error = stream.next()
            assert error is None
    finally:
        stream.close(cancel=True)
    match = wait_for_log(server, r"repeat: cancelled after (\d+) of 1000 responses")
    assert 2 <= int(match.group(1)) < 1000


# decoupled models over HTTP
def _post(
    server: RunningServer, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Any:
    connection = http.client.HTTPConnection(server.url, timeout=DEADLINE_S)
    connection.request("POST", path, json.dumps(body), headers or {})
    response = connection.getresponse()
    return response, connection


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(part[len("data: ") :]) for part in text.split("\n\n") if part.startswith("data: ")]


def test_generate_stream_sends_server_sent_events(server: RunningServer) -> None:
    response, connection = _post(
        server, "/v2/models/repeat/generate_stream", {"IN": [3, -1, 4], "DELAY_MS": 0, "id": "g"}
    )
    assert response.status == 200
    assert response.getheader("content-type") == "text/event-stream; charset=utf-8"
    assert response.getheader("transfer-encoding") == "chunked"
    events = _events(response.read().decode())
    connection.close()
    assert events == [
        {"IDX": 0, "OUT": 3, "id": "g", "model_name": "repeat", "model_version": "1"},
        {"error": "negative value -1 at index 1"},
        {"IDX": 2, "OUT": 4, "id": "g", "model_name": "repeat", "model_version": "1"},
    ]


def test_generate_wants_exactly_one_response(server: RunningServer) -> None:
    one, connection = _post(server, "/v2/models/repeat/generate", {"IN": [7], "DELAY_MS": 0})
    assert one.status == 200
    assert json.loads(one.read()) == {"IDX": 0, "OUT": 7, "model_name": "repeat", "model_version": "1"}
    connection.close()
    many, connection = _post(server, "/v2/models/repeat/generate", {"IN": [7, 8], "DELAY_MS": 0})
    assert "exactly 1 response" in json.loads(many.read())["error"]
    connection.close()
    missing, connection = _post(server, "/v2/models/repeat/generate", {"IN": [7]})
    assert (
        missing.status == 400
        and "missing required input(s) ['DELAY_MS']" in json.loads(missing.read())["error"]
    )
    connection.close()


def test_infer_streams_when_asked_for_events(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    with pytest.raises(
        InferenceServerException, match="HTTP end point doesn't support models with decoupled"
    ):
        client.infer("repeat", repeat_inputs(httpclient, [1]))
    client.close()
    body = {
        "id": "s",
        "inputs": [
            {"name": "IN", "shape": [2], "datatype": "INT32", "data": [10, 20]},
            {"name": "DELAY_MS", "shape": [1], "datatype": "INT32", "data": [0]},
        ],
    }
    response, connection = _post(server, "/v2/models/repeat/infer", body, {"Accept": "text/event-stream"})
    assert response.status == 200
    events = _events(response.read().decode())
    connection.close()
    assert [e["id"] for e in events] == ["s", "s"]
    assert [e["outputs"][0] for e in events] == [
        {"name": "OUT", "datatype": "INT32", "shape": [1], "data": [10]},
        {"name": "OUT", "datatype": "INT32", "shape": [1], "data": [20]},
    ]


def test_http_client_leaving_stops_the_model(server: RunningServer) -> None:
    body = json.dumps({"IN": list(range(2000)), "DELAY_MS": 20}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=DEADLINE_S) as sock:
        sock.sendall(
            b"POST /v2/models/repeat/generate_stream HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while received.count(b"data: ") < 2:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the stream"
            received += chunk
    match = wait_for_log(server, r"repeat: cancelled after (\d+) of 2000 responses")
    assert 2 <= int(match.group(1)) < 2000


# BLS
def _add_sub_stats(client: httpclient.InferenceServerClient) -> dict[str, Any]:
    return client.get_inference_statistics("add_sub")["model_stats"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bls_runs_requests_through_the_callee(server: RunningServer, mode: str) -> None:
    client = httpclient.InferenceServerClient(server.url)
    rows = 6
    a = np.random.default_rng(1).random((rows, 16), dtype=np.float32)
    b = np.full((rows, 16), 0.5, dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [rows, 16], "FP32"),
        httpclient.InferInput("INPUT1", [rows, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    before = _add_sub_stats(client)
    result = client.infer("bls_add_sub", inputs, parameters={"mode": mode})
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
    after = _add_sub_stats(client)
    # every row reached add_sub as a request of its own, through its scheduler: exec waits for each
    # answer, so each runs alone; async_exec sends them all at once, and add_sub's dynamic batcher
    # runs them together
    assert after["inference_count"] - before["inference_count"] == rows
    assert (
        after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == rows
    )
    executions = after["execution_count"] - before["execution_count"]
    if mode == "sync":
        assert executions == rows
    else:
        assert 1 <= executions < rows
    client.close()


def test_bls_errors_come_back_in_the_response(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="'no_such_model'"):
        client.infer("bls_add_sub", inputs, parameters={"mode": "missing"})
    client.close()


def test_bls_to_a_decoupled_model(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    tensor = httpclient.InferInput("IN", [4], "INT32")
    tensor.set_data_from_numpy(np.array([4, 3, 2, 1], dtype=np.int32))
    result = client.infer("bls_repeat", [tensor])
    assert result.as_numpy("OUT").tolist() == [4, 3, 2, 1]
    failing = httpclient.InferInput("IN", [2], "INT32")
    failing.set_data_from_numpy(np.array([4, -3], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="negative value -3 at index 1"):
        client.infer("bls_repeat", [failing])
    client.close()


# model control from Python
def _control(client: httpclient.InferenceServerClient, action: str, name: str) -> bool:
    inputs = [httpclient.InferInput("ACTION", [1], "BYTES"), httpclient.InferInput("NAME", [1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([action.encode()], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.array([name.encode()], dtype=np.object_))
    return bool(client.infer("bls_control", inputs).as_numpy("READY")[0])


def test_is_model_ready_from_python(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert _control(client, "ready", "add_sub") is True
    assert _control(client, "ready", "no_such_model") is False
    with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
        _control(client, "load", "add_sub")
    client.close()


def test_load_and_unload_models_from_python(tmp_path: Path) -> None:
    repository = pipeline_repository(tmp_path / "repository")
    running = start_nereid(
        repository, tmp_path / "nereid.log", "--model-control-mode=explicit", "--load-model=bls_control"
    )
    try:
        client = httpclient.InferenceServerClient(running.url)
        assert not client.is_model_ready("add_sub")
        assert _control(client, "load", "add_sub") is True
        assert client.is_model_ready("add_sub")
        assert _control(client, "unload", "add_sub") is False
        assert not client.is_model_ready("add_sub")
        with pytest.raises(InferenceServerException, match="no_such_model"):
            _control(client, "load", "no_such_model")
        client.close()
    finally:
        stop(running.process)


def test_models_calling_themselves_through_others_do_not_deadlock(
    server: RunningServer, python_execution_mode: str
) -> None:
    if python_execution_mode == "thread":
        # An instance thread waiting in a BLS call runs nothing else meanwhile: a model that calls itself
        # through others needs an instance per nested call, as in Triton. Only worker processes run
        # another execution while they wait.
        pytest.skip("thread mode: an instance waiting in BLS runs no other execution")
    # ping and pong have one instance each; every call after the first two comes back to an instance
    # that waits in a BLS call itself.
    client = httpclient.InferenceServerClient(server.url, concurrency=4, network_timeout=DEADLINE_S)
    pending = []
    for n in (0, 1, 4, 6):
        tensor = httpclient.InferInput("N", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
        pending.append((n, client.async_infer("ping", [tensor])))
    for n, request in pending:
        assert request.get_result().as_numpy("OUT").tolist() == [n]
    client.close()
