"""The Python backend, Nereid against the real Triton: one model.py served by both, driven by perf_analyzer.

Both servers load the same repository, `add_sub` from examples/python_model_repository (FP32 [16],
max_batch_size 64, one CPU instance), and perf_analyzer measures each at the same concurrencies, one
server at a time; the servers alternate for --rounds rounds. Nereid runs once per execution mode of the
Python backend (--modes: `process`, workers as in Triton, and `thread`, model.py inside the server).
Prints infer/s per round, then the median infer/s, latencies and CPU microseconds per request (every
process of the server, workers and stubs included, over each measurement, per request completed in it)
per server, the ratio nereid/triton of the medians, and the lowest and highest ratio of the two within
one round (how far this machine's noise moves it), per concurrency.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, free_port, start, start_nereid, stop, wait_ready
from cpu import completed_requests, cpu_per_request
from perf_analyzer import install_perf_analyzer, measure_model

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_command  # noqa: E402

MODEL = "add_sub"
SOURCE = ROOT / "examples" / "python_model_repository" / MODEL

# protocol -> how perf_analyzer reaches a server started with that protocol's port
PROTOCOLS: dict[str, Callable[[int], list[str]]] = {
    "http": lambda port: ["-u", f"127.0.0.1:{port}"],
}


def nereid_name(mode: str) -> str:
    return "nereid" if mode == "process" else f"nereid-{mode}"


def nereid_starter(mode: str, extra: list[str]) -> Callable[[int, Path], subprocess.Popen[bytes]]:
    flags = [*extra] if mode == "process" else [*extra, f"--backend-config=python,execution-mode={mode}"]
    return lambda port, repository: start_nereid(port, repository, None, *flags)


def start_triton(port: int, repository: Path) -> subprocess.Popen[bytes]:
    command, env = triton_command(repository, port)
    return start(command, "triton", env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrencies")
    parser.add_argument("--interval-ms", type=int, default=3000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument(
        "--stability", type=int, default=100, help="perf_analyzer stability percent (high: 2 noisy cores)"
    )
    parser.add_argument("--protocol", action="append", choices=sorted(PROTOCOLS), help="default: all")
    parser.add_argument("--nereid-only", action="store_true", help="skip the real Triton")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both servers, alternating")
    parser.add_argument(
        "--modes", default="process", help="Nereid's Python execution modes to run (process,thread: both)"
    )
    parser.add_argument(
        "--nereid-flag", action="append", default=[], help="a flag for Nereid's command line (repeatable)"
    )
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocol or sorted(PROTOCOLS)

    binary, lib = install_perf_analyzer()
    servers: dict[str, Callable[[int, Path], subprocess.Popen[bytes]]] = {
        nereid_name(mode): nereid_starter(mode, args.nereid_flag) for mode in args.modes.split(",")
    }
    if not args.nereid_only:
        servers["triton"] = start_triton
    # (server, protocol, concurrency) -> perf_analyzer's CSV row, one per round
    results: dict[tuple[str, str, int], list[dict[str, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="nereid-bench-python-") as tmp:
        repository = Path(tmp) / "repository"
        shutil.copytree(SOURCE, repository / MODEL)
        for round_ in range(args.rounds):
            for server, starter in servers.items():
                try:
                    measure_server(
                        server, starter, repository, protocols, concurrencies, binary, lib, args, results
                    )
                except (RuntimeError, subprocess.CalledProcessError) as exc:
                    print(f"FAILED on {server}: {exc}", file=sys.stderr)
                    return 1
            line = "  ".join(
                f"{server} c{c}={float(results[(server, p, c)][-1]['Inferences/Second']):.0f}"
                f"/{float(results[(server, p, c)][-1]['cpu us']):.0f}us"
                for p in protocols
                for c in concurrencies
                for server in servers
            )
            print(f"round {round_ + 1}: {line}", flush=True)
    report(servers, protocols, concurrencies, results)
    return 0


def measure_server(
    server: str,
    starter: Callable[[int, Path], subprocess.Popen[bytes]],
    repository: Path,
    protocols: list[str],
    concurrencies: list[int],
    binary: Path,
    lib: Path,
    args: argparse.Namespace,
    results: dict[tuple[str, str, int], list[dict[str, str]]],
) -> None:
    process = None
    try:
        port = free_port()
        process = starter(port, repository)
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
        for protocol in protocols:
            for concurrency in concurrencies:
                with cpu_per_request(process.pid, lambda: completed_requests(port, MODEL)) as cpu:
                    (row,) = measure_model(
                        binary, lib, MODEL, PROTOCOLS[protocol](port), f"{concurrency}:{concurrency}:1", args
                    )
                row["cpu us"] = f"{cpu.microseconds:.1f}"
                row["worker us"] = f"{cpu.worker_microseconds:.1f}"
                results.setdefault((server, protocol, concurrency), []).append(row)
    finally:
        stop(process)


def _median_row(rows: list[dict[str, str]]) -> dict[str, str]:
    """The round with the median throughput (its latencies come with it)."""
    ordered = sorted(rows, key=lambda r: float(r["Inferences/Second"]))
    return ordered[len(ordered) // 2]


def round_ratios(nereid: list[dict[str, str]], triton: list[dict[str, str]]) -> str:
    """nereid/triton within each round, lowest to highest: how far the machine's noise moves the ratio
    (the two servers of a round are measured minutes apart at most)."""
    ratios = sorted(
        float(n["Inferences/Second"]) / float(t["Inferences/Second"])
        for n, t in zip(nereid, triton, strict=True)
    )
    return f"{ratios[0]:.2f}-{ratios[-1]:.2f}"


def report(
    servers: dict[str, object],
    protocols: list[str],
    concurrencies: list[int],
    results: dict[tuple[str, str, int], list[dict[str, str]]],
) -> None:
    print(
        f"model {MODEL} (Python backend, FP32 [16], max_batch_size 64), batch 1, perf_analyzer, median round;"
        " cpu: CPU microseconds per request, all the server's processes; wrk: the part in its Python"
        " backend workers (Nereid) or stubs (Triton), the rest in the server process:"
    )
    nereids = [s for s in servers if s.startswith("nereid")]
    header = f"  {'protocol':<8} {'conc':>4}"
    for server in servers:
        header += f" {server + ' inf/s':>19} {'p50 ms':>7} {'p99 ms':>7} {'cpu us':>7} {'wrk us':>6}"
    if "triton" in servers:
        for server in nereids:
            header += f" {server + '/triton':>19} {'per round':>10} {'cpu ratio':>9}"
    print(header)
    for protocol in protocols:
        for concurrency in concurrencies:
            line = f"  {protocol:<8} {concurrency:>4}"
            medians = {server: _median_row(results[(server, protocol, concurrency)]) for server in servers}
            cpu, worker = (
                {
                    server: statistics.median(
                        float(r[column]) for r in results[(server, protocol, concurrency)]
                    )
                    for server in servers
                }
                for column in ("cpu us", "worker us")
            )
            for server, row in medians.items():
                line += (
                    f" {float(row['Inferences/Second']):>19.1f} {int(row['p50 latency']) / 1000:>7.3f}"
                    f" {int(row['p99 latency']) / 1000:>7.3f} {cpu[server]:>7.0f} {worker[server]:>6.0f}"
                )
            if "triton" in servers:
                for server in nereids:
                    ratio = float(medians[server]["Inferences/Second"]) / float(
                        medians["triton"]["Inferences/Second"]
                    )
                    rounds = round_ratios(
                        results[(server, protocol, concurrency)], results[("triton", protocol, concurrency)]
                    )
                    line += f" {ratio:>19.2f} {rounds:>10} {cpu[server] / cpu['triton']:>9.2f}"
            print(line)


if __name__ == "__main__":
    sys.exit(main())
