"""perf_analyzer -i grpc on `simple`: Nereid next to the real Triton and next to a bare grpc.aio server.

The bare server (grpc_echo_app.py) answers every ModelInfer with a fixed response, with no model and no
checks: the most a Python grpc.aio server can do, the ceiling for Nereid. Targets: Nereid at least as fast
as Triton, and at least 85% of the ceiling, at concurrency 1, 4 and 16.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import free_port, start, start_nereid, stop, wait_ready
from perf_analyzer import TWIN, install_perf_analyzer, measure, start_triton

HERE = Path(__file__).resolve().parent
TARGET_TRITON = 1.0
TARGET_CEILING = 0.85


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


def measure_all(binary: Path, lib: Path, port: int, args: argparse.Namespace) -> dict[int, dict[str, str]]:
    rows = {}
    for concurrency in args.concurrency:
        window = argparse.Namespace(**{**vars(args), "concurrency_range": f"{concurrency}:{concurrency}"})
        rows[concurrency] = measure(binary, lib, port, window, "grpc")[0]
    return rows


def run_server(name: str, args: argparse.Namespace, binary: Path, lib: Path) -> dict[int, dict[str, str]]:
    http_port, grpc_port = free_port(), free_port()
    while grpc_port == http_port:
        grpc_port = free_port()
    proc = None
    with tempfile.TemporaryDirectory(prefix="nereid-bench-repo-") as repo:
        try:
            if name == "triton":
                shutil.copytree(TWIN, Path(repo) / "simple")
                proc = start_triton(http_port, Path(repo), grpc_port)
                wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", proc, timeout=120)
            elif name == "nereid":
                proc = start_nereid(http_port, grpc_port=grpc_port)
                wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", proc)
            else:
                proc = start(
                    [sys.executable, "-I", str(HERE / "grpc_echo_app.py"), str(grpc_port)], "grpc-echo"
                )
                wait_port(grpc_port, proc)
            return measure_all(binary, lib, grpc_port, args)
        finally:
            stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--interval-ms", type=int, default=3000, help="measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument("--stability", type=int, default=100, help="perf_analyzer stability percent")
    parser.add_argument("--skip-triton", action="store_true", help="only Nereid and the ceiling")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all servers; medians are reported")
    args = parser.parse_args()

    binary, lib = install_perf_analyzer()
    names = ["nereid", "ceiling"] + ([] if args.skip_triton else ["triton"])
    # Rounds alternate the servers, so that a slow spell of the shared machine hits all of them; each
    # figure is the median over the rounds, and so is each ratio (taken within a round).
    rounds: list[dict[str, dict[int, dict[str, str]]]] = []
    try:
        for _ in range(args.rounds):
            rounds.append({name: run_server(name, args, binary, lib) for name in names})
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1

    def rate(results: dict[str, dict[int, dict[str, str]]], name: str, concurrency: int) -> float:
        return float(results[name][concurrency]["Inferences/Second"])

    def median_rate(name: str, concurrency: int) -> float:
        return statistics.median(rate(r, name, concurrency) for r in rounds)

    def median_p50(name: str, concurrency: int) -> float:
        return statistics.median(int(r[name][concurrency]["p50 latency"]) / 1000 for r in rounds)

    def median_ratio(name: str, concurrency: int) -> float:
        return statistics.median(rate(r, "nereid", concurrency) / rate(r, name, concurrency) for r in rounds)

    print(f"perf_analyzer -i grpc -m simple: infer/s (p50 ms), median of {args.rounds} rounds")
    header = f"{'conc':>4}" + "".join(f" {n:>20}" for n in names) + f" {'nereid/ceiling':>15}"
    header += "" if args.skip_triton else f" {'nereid/triton':>14}"
    print(header)
    met = True
    for c in args.concurrency:
        line = f"{c:>4}" + "".join(f" {median_rate(n, c):>11.0f} ({median_p50(n, c):>5.2f})" for n in names)
        ceiling = median_ratio("ceiling", c)
        line += f" {ceiling:>15.2f}"
        met &= ceiling >= TARGET_CEILING
        if not args.skip_triton:
            triton = median_ratio("triton", c)
            line += f" {triton:>14.2f}"
            met &= triton >= TARGET_TRITON
        print(line)
    print(
        f"target (nereid >= {TARGET_TRITON:.0%} of triton and >= {TARGET_CEILING:.0%} of the ceiling): "
        + ("met" if met else "NOT met")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
