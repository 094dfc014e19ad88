"""Stopping a real `nereid`: with a hung Python model it exits within --exit-timeout-secs (+2 s), the hung
request answered with an error; a second signal exits at once; open connections serve until closed."""

from __future__ import annotations

import http.client
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.conftest import RunningServer, start_nereid, stop

_HANG = """
import json
import pathlib
import time


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker = pathlib.Path(config["parameters"]["MARKER"]["string_value"])

    def execute(self, requests):
        self.marker.write_text("executing")
        time.sleep(3600)  # hung: never answers
        return []
"""
_CONFIG = """
name: "hang"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "MARKER" value: { string_value: "%s" } }
"""
_REQUEST = b'{"inputs":[{"name":"IN","datatype":"FP32","shape":[1],"data":[1.0]}]}'
EXIT_TIMEOUT_S = 3


def _repository(tmp_path: Path) -> Path:
    model = tmp_path / "repo" / "hang"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(_CONFIG % (tmp_path / "executing"))
    (model / "1" / "model.py").write_text(_HANG)
    return model.parent


def _send_hung_request(port: int, answers: list[tuple[int, bytes] | BaseException]) -> threading.Thread:
    def run() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            connection.request("POST", "/v2/models/hang/infer", _REQUEST)
            response = connection.getresponse()
            answers.append((response.status, response.read()))
        except BaseException as exc:  # recorded: the test asserts there was none
            answers.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _start(tmp_path: Path) -> RunningServer:
    return start_nereid(
        _repository(tmp_path), tmp_path / "nereid.log", f"--exit-timeout-secs={EXIT_TIMEOUT_S}"
    )


def _wait_until_executing(tmp_path: Path) -> None:
    """Until the model's execute has begun (it writes a marker file first)."""
    deadline = time.monotonic() + 30
    while not (tmp_path / "executing").exists():
        assert time.monotonic() < deadline, "the request never reached the model"
        time.sleep(0.02)


def _wait_for_log(server: RunningServer, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_exit_within_the_timeout_with_a_hung_model_and_the_request_answered(
    tmp_path: Path, signum: int
) -> None:
    server = _start(tmp_path)
    try:
        answers: list[tuple[int, bytes] | BaseException] = []
        client = _send_hung_request(server.http_port, answers)
        _wait_until_executing(tmp_path)
        start = time.monotonic()
        server.process.send_signal(signum)
        code = server.process.wait(timeout=EXIT_TIMEOUT_S + 30)
        took = time.monotonic() - start
        client.join(timeout=10)
        assert took < EXIT_TIMEOUT_S + 2, f"exited after {took:.1f} s\n{server.log()}"
        assert code == 0, server.log()
        assert len(answers) == 1 and isinstance(answers[0], tuple), answers
        status, body = answers[0]
        assert status == 503 and b"the server is stopping" in body, answers
        log = server.log()
        assert "killed 1 Python worker process" in log
        assert "Model 'hang' (version 1) has 1 in-flight inferences" in log  # what the drain waits for
        assert log.rstrip().endswith('"Nereid stopped"'), log
    finally:
        stop(server.process)


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    server = _start(tmp_path)
    try:
        answers: list[tuple[int, bytes] | BaseException] = []
        client = _send_hung_request(server.http_port, answers)
        _wait_until_executing(tmp_path)
        server.process.send_signal(signal.SIGINT)
        _wait_for_log(server, "stopping:")
        start = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        server.process.wait(timeout=EXIT_TIMEOUT_S + 30)
        took = time.monotonic() - start
        client.join(timeout=10)
        assert took < 1.5, f"exited {took:.1f} s after the second SIGINT\n{server.log()}"
        assert "SIGINT again: exiting at once" in server.log()
    finally:
        stop(server.process)


_SEQUENCE_CONFIG = """
name: "seq"
backend: "sequence"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""


def test_a_started_sequence_keeps_its_model_until_it_is_released(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "seq"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(_SEQUENCE_CONFIG)
    server = start_nereid(model.parent, tmp_path / "nereid.log", "--exit-timeout-secs=30")
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        body = (
            b'{"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[1]}],'
            b'"parameters":{"sequence_id":7,"sequence_start":true}}'
        )
        connection.request("POST", "/v2/models/seq/infer", body)
        assert connection.getresponse().status == 200
        connection.close()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=20) == 0, server.log()
        log = server.log()
        waited = log.index("Model 'seq' (version 1) has 1 in-flight inferences")  # the open sequence
        released = log.index("sequence 7 of model 'seq' idle for more than 1000000 us: released")
        assert waited < released < log.index('"Nereid stopped"'), log
    finally:
        stop(server.process)


def test_an_open_connection_serves_until_its_client_closes_it(tmp_path: Path) -> None:
    """As Triton: after SIGINT no new connection is taken, an open one goes on serving, and the server
    exits once its client closes it, the countdown going on from where it was (never starting over)."""
    model = tmp_path / "repo" / "seq"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(_SEQUENCE_CONFIG)
    server = start_nereid(model.parent, tmp_path / "nereid.log", "--exit-timeout-secs=30", grpc=True)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request("GET", "/v2/models/seq/ready")
        assert connection.getresponse().read() == b""
        server.process.send_signal(signal.SIGINT)
        _wait_for_log(server, "Timeout 30: Found 1 HTTP service connections")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
        connection.request("GET", "/v2/models/seq/ready")
        response = connection.getresponse()
        response.read()
        assert response.status == 200 and response.getheader("connection") != "close"
        # gRPC stops after HTTP, as in Triton: it still answers while HTTP clients are connected
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
            assert grpc_client.is_model_ready("seq")
        assert server.process.poll() is None
        closed = time.monotonic()
        connection.close()
        assert server.process.wait(timeout=20) == 0, server.log()
        assert time.monotonic() - closed < 5, server.log()
        log = server.log()
        assert log.count("Timeout 30: ") == 1, log
        assert log.index("HTTP service connections") < log.index(
            "Waiting for in-flight requests to complete."
        )
    finally:
        connection.close()
        stop(server.process)
