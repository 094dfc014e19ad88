"""Triton's HTTP client against a `nereid` process serving Python models (model.py, as Triton runs them)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT, TRITON_EXAMPLES, RunningServer, execution_mode_flags, start_nereid, stop

PYTHON_EXAMPLES = ROOT / "examples" / "python_model_repository"
FAULTY = ROOT / "tests" / "backends" / "python" / "models" / "faulty"
READY_FLAG = ROOT / "tests" / "backends" / "python" / "models" / "ready_flag"


@pytest.fixture(scope="module")
def python_server(
    tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str
) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("python_backend")
    repository = base / "model_repository"
    shutil.copytree(PYTHON_EXAMPLES, repository)
    shutil.copytree(FAULTY, repository / "faulty")
    shutil.copytree(READY_FLAG, repository / "ready_flag")
    fixture = TRITON_EXAMPLES / "simple_identity" / "config.pbtxt"
    if fixture.exists():  # Triton's own configuration of simple_identity, with our model.py
        shutil.copy(fixture, repository / "simple_identity" / "config.pbtxt")
    server = start_nereid(repository, base / "nereid.log", *execution_mode_flags(python_execution_mode))
    try:
        yield server
    finally:
        stop(server.process)


def _add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list[httpclient.InferInput]:
    inputs = [
        httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
        httpclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@pytest.mark.parametrize("binary", [False, True])
def test_add_sub(python_server: RunningServer, binary: bool) -> None:
    client = httpclient.InferenceServerClient(python_server.url)
    a = np.random.default_rng(0).random((3, 16), dtype=np.float32)
    b = np.full((3, 16), 0.25, dtype=np.float32)
    result = client.infer("add_sub", _add_sub_inputs(a, b, binary), request_id="r1")
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["id"] == "r1"
    only = client.infer(
        "add_sub", _add_sub_inputs(a, b, binary), outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    assert only.as_numpy("OUTPUT0") is None
    np.testing.assert_allclose(only.as_numpy("OUTPUT1"), a - b)


def test_simple_identity_strings(python_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(python_server.url)
    data = np.array([[b"hello", "wörld".encode(), b"", b"\x00\xff"]], dtype=np.object_)
    for binary in (False, True):
        sent = data if binary else data[:, :3]  # JSON carries text only
        tensor = httpclient.InferInput("INPUT0", list(sent.shape), "BYTES")
        tensor.set_data_from_numpy(sent, binary_data=binary)
        result = client.infer("simple_identity", [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == sent.tolist()


def test_model_readiness_asks_the_models_is_ready(python_server: RunningServer) -> None:
    """The model's own is_ready() answers GET /v2/models/<name>/ready (it is bounded by a timeout, which
    needs the request to run in a Task on Python 3.12 and later)."""
    client = httpclient.InferenceServerClient(python_server.url)
    marker = python_server.log_path.parent / "model_repository" / "ready_flag" / "not_ready"
    assert client.is_model_ready("ready_flag")
    marker.touch()
    try:
        assert not client.is_model_ready("ready_flag")
    finally:
        marker.unlink()
    assert client.is_model_ready("ready_flag")


def test_metadata_config_and_readiness(python_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(python_server.url)
    assert client.is_server_ready() and client.is_model_ready("add_sub")
    metadata = client.get_model_metadata("add_sub")
    assert metadata["platform"] == "python"
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    config = client.get_model_config("add_sub")
    assert config["backend"] == "python" and config["default_model_filename"] == "model.py"
    assert config["max_batch_size"] == 64


def test_model_errors_reach_the_client(python_server: RunningServer, python_execution_mode: str) -> None:
    client = httpclient.InferenceServerClient(python_server.url)

    def ask(command: str) -> httpclient.InferResult:
        tensor = httpclient.InferInput("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([command.encode()], dtype=np.object_))
        return client.infer("faulty", [tensor])

    with pytest.raises(InferenceServerException, match="ValueError: the model raised") as raised:
        ask("raise")
    assert raised.value.status() == "500"
    with pytest.raises(InferenceServerException, match="the model refused this request") as refused:
        ask("error")
    assert refused.value.status() == "400"
    if python_execution_mode == "process":
        with pytest.raises(InferenceServerException, match="Stub process 'faulty_0' is not healthy"):
            ask("segfault")
    answer = ask("ok").as_numpy("OUTPUT0")  # after a crash, from the restarted worker
    assert answer[0] == b"ok"
    # In thread mode the model runs in the server process itself (where a crash would end the server).
    assert (int(answer[1]) == python_server.process.pid) == (python_execution_mode == "thread")
    assert client.is_model_ready("faulty")
    assert "ValueError: the model raised" in python_server.log()


def test_python_models_serve_many_clients_at_once(python_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(python_server.url, concurrency=8)
    pending = []
    for i in range(32):
        a = np.full((1, 16), i, dtype=np.float32)
        pending.append((i, client.async_infer("add_sub", _add_sub_inputs(a, a, True))))
    for i, request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), np.full((1, 16), 2 * i))
    client.close()
