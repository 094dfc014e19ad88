"""The log of a running server: --log-file and --log-format from the command line, and the logging
extension changing the verbose level at run time through tritonclient (HTTP and gRPC)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES, RunningServer, start_nereid, stop
from tests.test_log_settings import ISO8601_RECORD


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    base = tmp_path_factory.mktemp("logging")
    log_file = base / "server.log"
    running = start_nereid(
        EXAMPLES, base / "console.log", f"--log-file={log_file}", "--log-format=ISO8601", grpc=True
    )
    try:
        yield running, log_file
    finally:
        stop(running.process)


def _infer(client: httpclient.InferenceServerClient, request_id: str) -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    client.infer("simple", inputs, request_id=request_id)


def _wait_for(path: Path, pattern: str) -> None:
    deadline = time.monotonic() + 10
    while re.search(pattern, path.read_text()) is None:
        assert time.monotonic() < deadline, f"no line matches {pattern!r}:\n{path.read_text()[-2000:]}"
        time.sleep(0.05)


def test_the_log_goes_to_the_file_in_the_format_asked_for(server: tuple[RunningServer, Path]) -> None:
    running, log_file = server
    records = [line for line in log_file.read_text().splitlines() if line and line[0] not in "+|"]
    assert records and all(ISO8601_RECORD.fullmatch(line) for line in records), records[:5]
    assert any('"Started HTTPService at 127.0.0.1:' in line for line in records)
    assert "Started HTTPService" not in running.log()  # not on the console when a file is given
    settings = httpclient.InferenceServerClient(running.url).get_log_settings()
    assert settings == {
        "log_file": str(log_file),
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "ISO8601",
    }


def test_the_verbose_level_changes_at_run_time(server: tuple[RunningServer, Path]) -> None:
    running, log_file = server
    http = httpclient.InferenceServerClient(running.url)
    grpc = grpcclient.InferenceServerClient(running.grpc_url)
    _infer(http, "quiet-1")
    answer = grpc.update_log_settings({"log_verbose_level": 1}, as_json=True)
    assert answer["settings"]["log_verbose_level"] == {"uint32_param": 1}
    _infer(http, "loud-1")
    _wait_for(log_file, r"request for model 'simple' version 1, id 'loud-1': OK in [0-9.]+ ms")
    assert http.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    _infer(http, "quiet-2")
    _infer(http, "")
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        http.update_log_settings({"log_file": "elsewhere.log"})
    text = log_file.read_text()
    assert "quiet-1" not in text and "quiet-2" not in text
