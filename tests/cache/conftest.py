"""A real Redis server for the response cache tests, on a free port of loopback, with a password."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_PASSWORD = "secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[int]:
    binary = shutil.which("redis-server")
    if binary is None:
        # CI installs it (.ci/run), and there a missing server fails; elsewhere these tests skip.
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)]
        + ["--requirepass", REDIS_PASSWORD],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        yield port
    finally:
        process.terminate()
        process.wait(10)
