"""Helpers shared by the bench scripts: ports, server start/stop, readiness, installs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "model_repository"

# The infer request used by every bench: model `simple`, INPUT0 = 0..15, INPUT1 = ones.
SIMPLE_BODY: dict = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_modules(*pairs: tuple[str, str]) -> None:
    """pip-install each (module, requirement) whose module cannot be imported."""
    missing = [req for mod, req in pairs if importlib.util.find_spec(mod) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


def apt_install(package: str) -> None:
    """apt-get install a Debian package, running apt-get update first if the plain install fails."""
    cmd = ["apt-get", "install", "-y", "-qq", package]
    if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], stdout=subprocess.DEVNULL, check=True)
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


def start(cmd: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a server with its output going to a temporary log file (kept for error reports)."""
    log = tempfile.NamedTemporaryFile(prefix=f"nereid-bench-{name}-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log_path = log.name  # type: ignore[attr-defined]
    return proc


def start_nereid(
    port: int, repository: Path = EXAMPLES, grpc_port: int | None = None, *extra: str
) -> subprocess.Popen[bytes]:
    """Start Nereid on `repository` serving HTTP on 127.0.0.1:port, and gRPC on grpc_port when given;
    `extra`: more command-line flags."""
    grpc = ["--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}"] if grpc_port else ["--allow-grpc=false"]
    return start(
        [
            sys.executable,
            "-m",
            "nereid",
            f"--model-repository={repository}",
            "--http-port",
            str(port),
            "--http-address",
            "127.0.0.1",
            *grpc,
            "--allow-metrics=false",
            *extra,
        ],
        "nereid",
    )


def log_tail(proc: subprocess.Popen[bytes], lines: int = 20) -> str:
    path = getattr(proc, "log_path", None)
    if not path:
        return ""
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Poll `url` until it answers 200; fail early if the server process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before ready:\n{log_tail(proc)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:.0f}s:\n{log_tail(proc)}")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate a server started by `start` (kill it if it lingers) and drop its log."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    path = getattr(proc, "log_path", None)
    if path:
        Path(path).unlink(missing_ok=True)


def require_binary(name: str, package: str) -> str:
    """Path to `name`, apt-installing `package` first when it is not on PATH."""
    if shutil.which(name) is None:
        apt_install(package)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found after installing {package}")
    return found


def callgrind_per_request(script: str, options: list[str], counts: tuple[int, int], concurrency: int) -> None:
    """Run `script` under callgrind with `options`, once per count of requests (`--requests=N --rounds=1`),
    and print the instructions per request from the difference: start-up and model loading cancel out."""
    import re

    totals = []
    for n in counts:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, script]
        command += [*options, f"--requests={n}", "--rounds=1"]
        # OpenBLAS's idle threads spin, and callgrind counts their spinning: one thread, none to spin
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        match = re.search(r"Collected : (\d+)", result.stderr)
        if match is None:
            raise RuntimeError(result.stderr[-2000:])
        totals.append(int(match.group(1)))
        print(f"{n} requests: {totals[-1]} instructions", flush=True)
    per = (totals[1] - totals[0]) / (counts[1] - counts[0])
    print(f"instructions per request (concurrency {concurrency}): {per:,.0f}")


def print_per_request(
    results: list[tuple[float, float]], concurrency: int, rounds: int, requests: int
) -> None:
    """The median CPU and wall microseconds per request over the rounds, (cpu, wall) each."""
    import statistics

    cpu = [c for c, _ in results]
    wall = [w for _, w in results]
    print(
        f"Python {sys.version.split()[0]}, concurrency {concurrency}: CPU {statistics.median(cpu):.1f} us "
        f"per request (best {min(cpu):.1f}), wall {statistics.median(wall):.1f} us, "
        f"over {rounds} rounds of {requests}"
    )


def path_parser(description: str | None) -> Any:
    """The options shared by the in-process infer path benches (argparse.ArgumentParser)."""
    import argparse

    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16, help="requests handed over per round")
    parser.add_argument("--requests", type=int, default=20000, help="requests per measurement round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", default="thread", help="the Python backend's execution mode")
    parser.add_argument("--instructions", help="N1,N2: instructions per request under callgrind")
    return parser


def path_main(parser: Any, run: Any, options: Any, script: str) -> None:
    """Parse the options; `--instructions N1,N2` counts instructions of `script` under callgrind with the
    `options(args)` given on, otherwise print `run(args)`'s CPU and wall time per request."""
    import logging

    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.instructions:
        n1, n2 = (int(n) for n in args.instructions.split(","))
        given = [f"--concurrency={args.concurrency}", f"--mode={args.mode}", *options(args)]
        callgrind_per_request(script, given, (n1, n2), args.concurrency)
        return
    print_per_request(run(args), args.concurrency, args.rounds, args.requests)
