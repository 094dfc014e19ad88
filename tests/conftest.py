"""Shared fixtures: repositories copied into temp dirs, and a real `nereid` subprocess on free ports."""

from __future__ import annotations

import gc
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "model_repository"
# Triton's own example repository, beside the checkout where it is available.
TRITON_EXAMPLES = ROOT.parent / "shared" / "fixtures" / "triton-examples"


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Distinct ports of 127.0.0.1 that were free a moment ago (held together, so never the same twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    http_port: int
    log_path: Path
    grpc_port: int | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        if self.grpc_port is None:
            raise RuntimeError("this server was started without gRPC")
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_ready(url: str, process: subprocess.Popen[bytes] | None, timeout: float = 60.0) -> None:
    """Poll /v2/health/ready until it answers 200; fail at once if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"server at {url} not ready after {timeout} s")


# The gRPC core of servers whose test names none: NEREID_TEST_GRPC_CORE=aio runs the gRPC suites on
# grpc.aio; unset (or =native), the default: the native core wherever it can serve (TLS tests get
# grpc.aio).
GRPC_CORE_FLAGS = {
    "aio": ("--grpc-core=aio",),
    "native": (),
    "": (),
}


def start_nereid(repository: Path, log_path: Path, *extra: str, grpc: bool = False) -> RunningServer:
    """Nereid on free ports of 127.0.0.1, HTTP always, gRPC when asked; ready when this returns."""
    port, grpc_port, metrics_port = free_ports(3)
    grpc_flags = [f"--grpc-port={grpc_port}", "--grpc-address=127.0.0.1"] if grpc else ["--allow-grpc=false"]
    # A test that turns metrics on without naming a port gets a free one, never the default 8002.
    metrics_flags = [f"--metrics-port={metrics_port}", "--metrics-address=127.0.0.1"]
    if any(flag.startswith("--metrics-port") for flag in extra):
        metrics_flags = []
    if grpc and not any(flag.startswith("--grpc-core") for flag in extra):
        grpc_flags += GRPC_CORE_FLAGS[os.environ.get("NEREID_TEST_GRPC_CORE", "")]
    command = [
        sys.executable,
        "-m",
        "nereid",
        f"--model-repository={repository}",
        f"--http-port={port}",
        "--http-address=127.0.0.1",
        *grpc_flags,
        "--allow-metrics=false",
        *metrics_flags,
        *extra,
    ]
    log = log_path.open("wb")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    server = RunningServer(process, port, log_path, grpc_port if grpc else None)
    try:
        wait_ready(server.url, process)
    except BaseException:
        stop(process)
        raise RuntimeError(f"nereid did not start:\n{server.log()}") from None
    return server


def child_processes(pid: int) -> list[int]:
    """The processes `pid` started and that still run (its Python workers), from /proc: a child is listed
    under the thread that started it, which need not be the main one. Empty where /proc lacks the lists."""
    tasks = Path(f"/proc/{pid}/task")
    children: list[int] = []
    for task in tasks.iterdir() if tasks.is_dir() else ():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:  # that thread ended meanwhile, or no such list on this kernel
            continue
    return children


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # A stopping server serves the connections open at the signal until their clients close them (as
        # Triton does): the clients a test left unclosed (tritonclient's HTTP client sits in a reference
        # cycle) are collected first, so that the server need not wait out --exit-timeout-secs for them.
        gc.collect()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PYTHON_EXECUTION_MODES = ("process", "thread")


@pytest.fixture(scope="module", params=PYTHON_EXECUTION_MODES)
def python_execution_mode(request: pytest.FixtureRequest) -> str:
    """Where Python models run: each module's servers start once per mode (worker processes, then threads
    of the server process)."""
    return str(request.param)


def execution_mode_flags(mode: str) -> tuple[str, ...]:
    """The server flags that make `mode` every Python model's default."""
    return () if mode == "process" else (f"--backend-config=python,execution-mode={mode}",)


@pytest.fixture
def examples_repository(tmp_path: Path) -> Path:
    target = tmp_path / "model_repository"
    shutil.copytree(EXAMPLES, target)
    return target


@pytest.fixture(scope="session")
def examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server on the bundled examples, shared by the tests that only read from it."""
    base = tmp_path_factory.mktemp("examples")
    repository = base / "model_repository"
    shutil.copytree(EXAMPLES, repository)
    server = start_nereid(repository, base / "nereid.log", "--allow-client-shm=true")
    try:
        yield server
    finally:
        stop(server.process)


@pytest.fixture(scope="session")
def triton_examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Nereid on a copy of Triton's own example ONNX models (simple, simple_int8, simple_string) where they
    are at hand; elsewhere on the bundled examples, built to the same configs, so the client tests run."""
    source = TRITON_EXAMPLES if TRITON_EXAMPLES.is_dir() else EXAMPLES
    base = tmp_path_factory.mktemp("triton_examples")
    repository = base / "model_repository"
    for name in ("simple", "simple_int8", "simple_string"):
        shutil.copytree(source / name, repository / name)
    server = start_nereid(repository, base / "nereid.log")
    try:
        yield server
    finally:
        stop(server.process)
