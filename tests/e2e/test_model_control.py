"""Model control against a real `nereid` process, through tritonclient: explicit and poll modes,
reloads under load without a failed request, restricted APIs, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES, start_nereid, stop

SIMPLE_ONNX = EXAMPLES / "simple" / "1" / "model.onnx"
ADMIN = {"admin-key": "s3cret"}


def _repository(tmp_path: Path) -> Path:
    repository = tmp_path / "repo"
    for name in ("simple", "simple_int8"):
        shutil.copytree(EXAMPLES / name, repository / name)
    return repository


def _infer(client: httpclient.InferenceServerClient, model: str = "simple") -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return client.infer(model, inputs).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def test_explicit_mode_with_tritonclient(tmp_path: Path) -> None:
    server = start_nereid(
        _repository(tmp_path),
        tmp_path / "nereid.log",
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--http-restricted-api=model-repository:admin-key=s3cret",
    )
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        with pytest.raises(
            InferenceServerException, match="This API is restricted, expecting header 'admin-key'"
        ):
            client.get_model_repository_index()
        assert client.get_model_repository_index(headers=ADMIN) == [
            {"name": "simple", "version": "1", "state": "READY"},
            {"name": "simple_int8"},
        ]
        assert not client.is_model_ready("simple_int8")
        client.load_model("simple_int8", headers=ADMIN)
        assert client.is_model_ready("simple_int8")
        # a model delivered entirely through the API: its config as JSON, its files as bytes
        config = json.dumps({"platform": "onnxruntime_onnx", "max_batch_size": 4})
        client.load_model(
            "delivered", headers=ADMIN, config=config, files={"file:1/model.onnx": SIMPLE_ONNX.read_bytes()}
        )
        assert (_infer(client, "delivered") == np.arange(1, 17)).all()
        client.unload_model("delivered", headers=ADMIN)
        assert not client.is_model_ready("delivered")
        # Triton's words and status (INTERNAL), which its clients look for
        with pytest.raises(InferenceServerException, match="failed to load 'nope', failed to poll") as raised:
            client.load_model("nope", headers=ADMIN)
        assert "no model folder named 'nope'" in str(raised.value) and raised.value.status() == "500"
        # a file name no file system takes is refused before anything is written, naming the limit, with
        # Triton's words and status for an upload it cannot write
        with pytest.raises(InferenceServerException, match="has a name longer than 255 bytes") as raised:
            client.load_model("x", headers=ADMIN, config="{}", files={"file:" + "A" * 256: b"data"})
        assert "failed to poll from model repository" in str(raised.value) and raised.value.status() == "500"
        with pytest.raises(InferenceServerException, match="failed to load 'x', failed to poll"):
            client.load_model("x", headers=ADMIN, files={"file:1/model.onnx": b"data"})
        with pytest.raises(InferenceServerException, match="must be a relative path"):
            client.load_model("x", headers=ADMIN, config="{}", files={"file:../x": b"data"})
        client.unload_model("simple", headers=ADMIN)
        rows = client.get_model_repository_index(headers=ADMIN)
        assert {"name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in rows
        with pytest.raises(InferenceServerException, match="has no available versions"):
            _infer(client)
    finally:
        client.close()
        stop(server.process)


def test_none_mode_refuses_load_and_unload(tmp_path: Path) -> None:
    server = start_nereid(_repository(tmp_path), tmp_path / "nereid.log")
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        with pytest.raises(InferenceServerException, match="not allowed if polling is enabled"):
            client.load_model("simple")
        with pytest.raises(InferenceServerException, match="not allowed if polling is enabled"):
            client.unload_model("simple")
    finally:
        client.close()
        stop(server.process)


def test_twenty_reloads_under_load_fail_no_request(tmp_path: Path) -> None:
    repository = _repository(tmp_path)
    server = start_nereid(
        repository, tmp_path / "nereid.log", "--model-control-mode=explicit", "--load-model=simple"
    )
    admin = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    stop_clients = threading.Event()
    failures: list[str] = []
    answered = [0] * 8

    def hammer(index: int) -> None:
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        try:
            while not stop_clients.is_set():
                try:
                    result = _infer(client)
                except Exception as exc:  # every failure is a test failure, recorded with its text
                    failures.append(str(exc))
                    continue
                if not (result == np.arange(1, 17)).all():
                    failures.append(f"wrong answer {result}")
                answered[index] += 1
        finally:
            client.close()

    clients = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for thread in clients:
        thread.start()
    try:
        for round_ in range(20):
            if round_ % 3 == 0:  # a new version folder; the policy serves only the latest
                version = repository / "simple" / str(round_ + 2)
                version.mkdir()
                shutil.copy(SIMPLE_ONNX, version / "model.onnx")
                admin.load_model("simple")
            elif round_ % 3 == 1:  # a changed configuration
                config = {"platform": "onnxruntime_onnx", "max_batch_size": 8 + round_}
                admin.load_model("simple", config=json.dumps(config))
            elif round_ == 5:  # a broken version: the load fails, the serving one stays
                broken = repository / "simple" / "100"
                broken.mkdir()
                (broken / "model.onnx").write_bytes(b"broken")
                with pytest.raises(InferenceServerException, match="load failed for model 'simple'"):
                    admin.load_model("simple")
                shutil.rmtree(broken)
            else:  # a plain reload of the same files
                admin.load_model("simple")
    finally:
        stop_clients.set()
        for thread in clients:
            thread.join()
        admin.close()
        stop(server.process)
    assert failures == []
    assert all(count > 0 for count in answered)


def test_poll_mode_picks_up_a_new_version_within_two_periods(tmp_path: Path) -> None:
    repository = _repository(tmp_path)
    server = start_nereid(
        repository, tmp_path / "nereid.log", "--model-control-mode=poll", "--repository-poll-secs=1"
    )
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        version = repository / "simple" / "2"
        version.mkdir()
        shutil.copy(SIMPLE_ONNX, version / "model.onnx")
        added = time.monotonic()
        while not client.is_model_ready("simple", "2"):
            assert time.monotonic() - added < 2.5, "version 2 was not loaded within two poll periods"
            time.sleep(0.05)
        assert (_infer(client) == np.arange(1, 17)).all()
    finally:
        client.close()
        stop(server.process)


def test_sigterm_stops_cleanly_under_load(tmp_path: Path) -> None:
    """As in Triton, connections open at the signal go on serving until their clients leave; the server
    then exits at once, no request having failed."""
    server = start_nereid(_repository(tmp_path), tmp_path / "nereid.log")
    errors: list[str] = []
    signalled, leave = threading.Event(), threading.Event()
    before_signal, after_signal = threading.Semaphore(0), threading.Semaphore(0)

    def client_loop() -> None:
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        answers_after_signal = 0
        try:
            _infer(client)  # connected before the signal
            before_signal.release()
            while not leave.is_set():
                try:
                    _infer(client)
                except InferenceServerException as exc:  # an HTTP error response: never acceptable
                    errors.append(str(exc))
                    return
                if signalled.is_set():
                    answers_after_signal += 1
                    if answers_after_signal == 1:
                        after_signal.release()
        finally:
            client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for _ in threads:
            assert before_signal.acquire(timeout=30)
        server.process.send_signal(signal.SIGTERM)
        signalled.set()
        for _ in threads:  # each open connection is still answered after the signal
            assert after_signal.acquire(timeout=10), server.log()
        leave.set()
        for thread in threads:
            thread.join(30)
        assert server.process.wait(10) == 0, server.log()
        assert errors == []
    finally:
        leave.set()
        stop(server.process)
