"""The response cache, Nereid against the real Triton: a workload in which a chosen share of the requests
repeat earlier ones, with the cache on and off.

Both servers load the same repository, `add_sub` from examples/python_model_repository (FP32 [16],
max_batch_size 64, one CPU instance), with `response_cache { enable: true }` and
`--cache-config=local,size=...` when the cache is on. A closed-loop client of this script's own
(--concurrency threads, keep-alive HTTP, JSON bodies) sends requests for --duration seconds. Request i
repeats one of --hot inputs when a fixed hash of i falls below --repeat, and is new otherwise, so every
run sends the same sequence and, once the hot inputs are in the cache, about --repeat of the requests can
be answered from it. Each measurement starts a fresh server (an empty cache); servers and cache settings
alternate for --rounds rounds.

Prints, per round, infer/s and CPU microseconds per request; then per server and cache setting the
median round's infer/s, the hit ratio (cache hits over lookups, from the model's statistics), and the
median CPU microseconds per request of every process of the server (workers and stubs included, from
/proc), with nereid/triton ratios.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, free_port, start, start_nereid, stop, wait_ready
from cpu import completed_requests, cpu_per_request

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_cache_flag, triton_command  # noqa: E402

MODEL = "add_sub"
SOURCE = ROOT / "examples" / "python_model_repository" / MODEL
PATH = f"/v2/models/{MODEL}/infer"


@dataclass(frozen=True)
class Workload:
    repeat: float  # share of requests that repeat a hot input
    hot: int  # how many distinct inputs the repeats cycle through
    concurrency: int
    duration_s: float

    def input_id(self, index: int) -> int:
        """Request `index`'s input: a hot one (0 .. hot-1) or one never sent before (hot + index)."""
        mixed = (index * 2654435761) % 2**32  # Knuth's multiplicative hash: evenly spread, fixed
        return index % self.hot if mixed < self.repeat * 2**32 else self.hot + index


def body(input_id: int) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [float(input_id)] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            ]
        }
    ).encode()


def drive(port: int, workload: Workload) -> int:
    """Run the closed loop for the workload's duration; the requests completed. Client `c` sends requests
    c, c + C, c + 2C, ... so that the sequence does not depend on which thread runs faster."""
    deadline = time.monotonic() + workload.duration_s
    done = [0] * workload.concurrency
    errors: list[str] = []

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        index = number
        try:
            while time.monotonic() < deadline and not errors:
                connection.request(
                    "POST", PATH, body(workload.input_id(index)), {"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200:
                    errors.append(f"{response.status}: {answer[:200]!r}")
                    return
                done[number] += 1
                index += workload.concurrency
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(workload.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"request failed: {errors[0]}")
    return sum(done)


def warm_up(port: int, requests: int = 20) -> None:
    """A few requests on inputs the measurement never sends (negative ids): the model's first executions
    are slower, and none of these can be a hit later."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for k in range(requests):
            connection.request("POST", PATH, body(-1 - k), {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"warm-up request failed: {response.status}")
    finally:
        connection.close()


def cache_counts(port: int) -> tuple[int, int]:
    """(hits, misses) of the model so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{MODEL}/stats", timeout=10) as response:
        (stats,) = json.load(response)["model_stats"]
    inference = stats["inference_stats"]
    return int(inference["cache_hit"]["count"]), int(inference["cache_miss"]["count"])


@dataclass
class Measurement:
    throughput: float
    cpu_us: float
    hit_ratio: float | None  # None: the cache was off


Starter = Callable[[int, Path, tuple[str, ...]], subprocess.Popen[bytes]]


def nereid_starter(mode: str) -> Starter:
    flags = () if mode == "process" else (f"--backend-config=python,execution-mode={mode}",)
    return lambda port, repository, extra: start_nereid(port, repository, None, *flags, *extra)


def start_triton(port: int, repository: Path, extra: tuple[str, ...]) -> subprocess.Popen[bytes]:
    command, env = triton_command(repository, port)
    cache = (triton_cache_flag(),) if extra else ()
    return start([*command, *cache, *extra], "triton", env)


def measure(
    starter: Starter, repository: Path, cache_flags: tuple[str, ...], workload: Workload
) -> Measurement:
    process = None
    try:
        port = free_port()
        process = starter(port, repository, cache_flags)
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
        warm_up(port)
        hits_before, misses_before = cache_counts(port)
        started = time.monotonic()
        with cpu_per_request(process.pid, lambda: completed_requests(port, MODEL)) as cpu:
            completed = drive(port, workload)
        elapsed = time.monotonic() - started
        hits, misses = cache_counts(port)
        lookups = (hits - hits_before) + (misses - misses_before)
        ratio = (hits - hits_before) / lookups if cache_flags and lookups else None
        return Measurement(completed / elapsed, cpu.microseconds, ratio)
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=float, default=0.5, help="share of requests that repeat a hot input")
    parser.add_argument(
        "--hot", type=int, default=64, help="distinct inputs the repeated requests cycle through"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="client threads (closed loop)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every server and setting, alternating"
    )
    parser.add_argument("--cache-size", type=int, default=64 << 20, help="bytes of the local cache")
    parser.add_argument("--modes", default="process", help="Nereid's Python execution modes to run")
    parser.add_argument("--nereid-only", action="store_true", help="skip the real Triton")
    args = parser.parse_args()
    if not 0.0 <= args.repeat <= 1.0 or args.hot < 1:
        parser.error("--repeat must be within [0, 1] and --hot at least 1")
    workload = Workload(args.repeat, args.hot, args.concurrency, args.duration)
    servers: dict[str, Starter] = {
        ("nereid" if mode == "process" else f"nereid-{mode}"): nereid_starter(mode)
        for mode in args.modes.split(",")
    }
    if not args.nereid_only:
        servers["triton"] = start_triton
    settings = {"off": (), "on": (f"--cache-config=local,size={args.cache_size}",)}
    results: dict[tuple[str, str], list[Measurement]] = {}
    with tempfile.TemporaryDirectory(prefix="nereid-bench-cache-") as tmp:
        repositories = {"off": Path(tmp) / "off", "on": Path(tmp) / "on"}
        for repository in repositories.values():
            shutil.copytree(SOURCE, repository / MODEL)
        with (repositories["on"] / MODEL / "config.pbtxt").open("a") as config:
            config.write("\nresponse_cache { enable: true }\n")
        for round_ in range(args.rounds):
            line = []
            for server, starter in servers.items():
                for setting, flags in settings.items():
                    try:
                        result = measure(starter, repositories[setting], flags, workload)
                    except (RuntimeError, OSError) as exc:
                        print(f"FAILED on {server} (cache {setting}): {exc}", file=sys.stderr)
                        return 1
                    results.setdefault((server, setting), []).append(result)
                    line.append(f"{server}/{setting} {result.throughput:.0f}/s {result.cpu_us:.0f}us")
            print(f"round {round_ + 1}: " + "  ".join(line), flush=True)
    report(list(servers), workload, results)
    return 0


def report(servers: list[str], workload: Workload, results: dict[tuple[str, str], list[Measurement]]) -> None:
    print(
        f"model {MODEL} (Python backend, FP32 [16]), {workload.concurrency} clients, closed loop, "
        f"{workload.repeat:.0%} of requests repeat one of {workload.hot} inputs; median of "
        f"{len(next(iter(results.values())))} rounds; cpu: CPU microseconds per request, all the server's processes"
    )
    print(f"  {'server':<14} {'cache':<5} {'infer/s':>9} {'hit ratio':>9} {'cpu us':>7} {'on/off cpu':>10}"
          f" {'n/triton inf/s':>14} {'n/triton cpu':>12}")  # fmt: skip
    medians = {
        key: (
            statistics.median(m.throughput for m in runs),
            statistics.median(m.cpu_us for m in runs),
            None if runs[0].hit_ratio is None else statistics.median(m.hit_ratio or 0.0 for m in runs),
        )
        for key, runs in results.items()
    }
    for server in servers:
        for setting in ("off", "on"):
            throughput, cpu, hits = medians[(server, setting)]
            line = (
                f"  {server:<14} {setting:<5} {throughput:>9.1f} {'-' if hits is None else f'{hits:.3f}':>9}"
            )
            line += f" {cpu:>7.0f} {cpu / medians[(server, 'off')][1]:>10.2f}"
            if server != "triton" and "triton" in servers:
                triton_throughput, triton_cpu, _ = medians[("triton", setting)]
                line += f" {throughput / triton_throughput:>14.2f} {cpu / triton_cpu:>12.2f}"
            print(line)


if __name__ == "__main__":
    sys.exit(main())
