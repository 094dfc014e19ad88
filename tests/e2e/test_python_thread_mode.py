"""EXECUTION_MODE thread against a `nereid` process: what differs from worker processes. (Everything the
two modes share runs in both, through the `python_execution_mode` fixture of the Python-backend suites.)"""

from __future__ import annotations

import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT, RunningServer, start_nereid, stop

MODELS = Path(__file__).parent / "thread_models"
FAULTY = ROOT / "tests" / "backends" / "python" / "models" / "faulty"
ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"
DEADLINE_S = 20.0
PROCESS_MODE = 'parameters { key: "EXECUTION_MODE" value { string_value: "process" } }\n'


def _relay(repository: Path, name: str, extra: str = "") -> None:
    shutil.copytree(MODELS / "relay", repository / name)
    config = repository / name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "relay"', f'name: "{name}"') + extra)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Python models in thread mode by default (one asks for a worker process), explicit model control."""
    base = tmp_path_factory.mktemp("thread_mode")
    repository = base / "repository"
    for name in ("blocker", "finalizer", "isolated"):
        shutil.copytree(MODELS / name, repository / name)
    shutil.copytree(FAULTY, repository / "faulty")
    shutil.copytree(ADD_SUB, repository / "add_sub")
    _relay(repository, "relay")
    _relay(repository, "relay_process", PROCESS_MODE)
    _relay(repository, "relay_back")
    loaded = ("blocker", "finalizer", "faulty", "add_sub", "relay", "relay_process", "relay_back")
    running = start_nereid(
        repository,
        base / "nereid.log",
        "--backend-config=python,execution-mode=thread",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in loaded),
    )
    try:
        yield running
    finally:
        stop(running.process)


def _ask_faulty(client: httpclient.InferenceServerClient, command: str) -> httpclient.InferResult:
    tensor = httpclient.InferInput("INPUT0", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([command.encode()], dtype=np.object_))
    return client.infer("faulty", [tensor])


def test_a_raising_model_fails_its_requests_and_the_server_serves_on(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="ValueError: the model raised") as raised:
            _ask_faulty(client, "raise")
        assert raised.value.status() == "500"
    answer = _ask_faulty(client, "ok").as_numpy("OUTPUT0")
    assert answer[0] == b"ok" and int(answer[1]) == server.process.pid  # run in the server process
    assert server.process.poll() is None
    assert "ValueError: the model raised" in server.log()
    client.close()


def test_a_blocked_model_holds_only_its_own_instance(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url, network_timeout=DEADLINE_S)
    command = httpclient.InferInput("COMMAND", [1], "BYTES")
    command.set_data_from_numpy(np.array([b"block"], dtype=np.object_))
    blocked = client.async_infer("blocker", [command])
    try:
        other = httpclient.InferenceServerClient(server.url, network_timeout=DEADLINE_S)
        a = np.ones((1, 16), np.float32)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        for _ in range(20):  # other models answer, and the event loop answers health checks at once
            np.testing.assert_array_equal(other.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
            started = time.monotonic()
            with urllib.request.urlopen(f"http://{server.url}/v2/health/ready", timeout=DEADLINE_S) as ready:
                assert ready.status == 200
            assert time.monotonic() - started < 1.0
        other.close()
    finally:
        release = Path(server.log_path.parent / "repository" / "blocker" / "release")
        release.touch()
    assert blocked.get_result().as_numpy("OUT")[0] == b"released"
    release.unlink()
    client.close()


def test_bls_from_a_thread_to_a_worker_process_and_back(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    tensor = httpclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(np.array([1, 2], np.int32))
    result = client.infer("relay", [tensor], parameters={"route": "relay_process,relay_back"})
    pids = result.as_numpy("OUT").tolist()
    server_pid = server.process.pid
    assert pids[0] == server_pid and pids[2] == server_pid and pids[1] != server_pid  # thread, worker, thread
    client.close()


def test_bls_errors_come_back_through_both_modes(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException, match="is not ready"):
        client.infer("relay", [tensor], parameters={"route": "relay_process,no_such_model"})
    assert "relays along 'relay_process,no_such_model'" in server.log()  # Logger, from the thread
    client.close()


def test_unloading_runs_finalize_in_the_server_process(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([7], np.int32))
    assert client.infer("finalizer", [tensor]).as_numpy("OUT").tolist() == [7]
    marker = server.log_path.parent / "repository" / "finalizer" / "finalized"
    assert not marker.exists()
    client.unload_model("finalizer")
    deadline = time.monotonic() + DEADLINE_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == str(server.process.pid)
    client.close()


def test_a_model_with_an_execution_environment_cannot_run_in_thread_mode(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("isolated")
    message = str(refused.value)
    assert "EXECUTION_MODE" in message and "EXECUTION_ENV_PATH" in message
    assert not client.is_model_ready("isolated")
    client.close()
