"""A real `nereid` serving from a bucket in poll mode: a new version swaps in while clients keep sending."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import tritonclient.http as httpclient

from tests.conftest import EXAMPLES, free_ports, stop, wait_ready
from tests.repository.cloud.servers import Bucket

SIMPLE = EXAMPLES / "simple"


def _versions(url: str) -> list[str]:
    with urllib.request.urlopen(f"http://{url}/v2/models/simple", timeout=5) as response:
        return list(orjson.loads(response.read())["versions"])


def test_new_version_swaps_in_under_load(bucket: Bucket, tmp_path: Path) -> None:
    bucket.put("simple/config.pbtxt", (SIMPLE / "config.pbtxt").read_bytes())
    bucket.put("simple/1/model.onnx", (SIMPLE / "1" / "model.onnx").read_bytes())
    http_port, grpc_port = free_ports(2)
    log_path = tmp_path / "nereid.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nereid",
                f"--model-repository={bucket.url}",
                "--model-control-mode=poll",
                "--repository-poll-secs=1",
                "--http-address=127.0.0.1",
                f"--http-port={http_port}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={grpc_port}",
                "--allow-metrics=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **bucket.environ, "PYTHONUNBUFFERED": "1"},
        )
    url = f"127.0.0.1:{http_port}"
    stopping = threading.Event()
    answers: list[int] = []
    errors: list[str] = []

    def send() -> None:
        client = httpclient.InferenceServerClient(url)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones_like(a))
        while not stopping.is_set():
            try:
                result = client.infer("simple", inputs)
                assert (result.as_numpy("OUTPUT0") == a + 1).all()
                answers.append(1)
            except Exception as exc:  # every failure is reported below
                errors.append(repr(exc))
        client.close()

    clients = [threading.Thread(target=send) for _ in range(2)]
    try:
        wait_ready(url, process)
        assert _versions(url) == ["1"]
        for client in clients:
            client.start()
        bucket.put("simple/2/model.onnx", (SIMPLE / "1" / "model.onnx").read_bytes())
        deadline = time.monotonic() + 60
        while _versions(url) != ["2"]:
            assert time.monotonic() < deadline, "version 2 was not served within 60 s"
            time.sleep(0.2)
        served_before_swap = len(answers)
        while len(answers) < served_before_swap + 20:  # and it answers afterwards too
            assert time.monotonic() < deadline, "no answers after the swap"
            time.sleep(0.05)
    finally:
        stopping.set()
        for client in clients:
            if client.is_alive():
                client.join(timeout=30)
        stop(process)
    assert errors == [], (
        f"{len(errors)} requests failed during the reload, e.g. {errors[:3]}\n{log_path.read_text()}"
    )
    assert served_before_swap > 0
