"""Dynamic batching, Nereid against the real Triton: the Python `add_sub` model with `dynamic_batching {}`.

Both servers load the same repository (examples/python_model_repository/add_sub, FP32 [16],
max_batch_size 64, one CPU instance, plus `dynamic_batching { }`), and perf_analyzer drives each over
HTTP and gRPC at each concurrency, one server at a time; the servers alternate for --rounds rounds.
Over gRPC a bare grpc.aio server that answers the same requests with no model behind it
(grpc_echo_app.py) gives the Python ceiling; over HTTP a bare uvicorn app that answers the same binary
infer requests with a fixed response (http_infer_echo_app.py) gives it. Afterwards each server's statistics say how large its
batches were (inference_count / execution_count).

Nereid runs once per execution mode of the Python backend (--modes: `process`, workers as in Triton,
and `thread`, model.py inside the server process). Each measurement also takes the CPU time of every
process of the server (workers and stubs included) per request completed in it.

Prints the median infer/s and CPU microseconds per request of each server, the ratios nereid/triton,
nereid/ceiling and ceiling/triton, and whether the targets are met: over HTTP at least 1.0 of Triton
everywhere and 1.5 from concurrency 16 on; over gRPC at least 0.9 of the ceiling (worker processes) or
1.0 of Triton at concurrency 16 (thread mode); in thread mode, at most half of Triton's CPU per request.
The ceiling/triton column bounds what any Python server can reach on the machine at hand: a target
above it is out of reach there.

With --shared-memory system perf_analyzer puts every request's inputs and outputs in system shared memory
regions it registers (the body carries JSON only); the bare ceilings take no regions and are left out, and
so are the targets, which are for tensors in the body. Nereid then runs with --allow-client-shm=true.

With --traced each Nereid mode also runs a twin that traces every request. The twin and its untraced
server are up together, and each cell measures one right after the other (the traced one first every
other round), the other idle, so that both see the host as it is at that moment. A second table gives
tracing's cost per cell: the median over the rounds of the traced server's infer/s over the untraced
one's at that cell in that round, with their range, and the extra CPU per request likewise
(bench/README.md, "Reading the tracing table").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, ensure_modules, free_port, start, start_nereid, stop, wait_ready
from cpu import completed_requests, cpu_per_request
from grpc_frontend import wait_port
from perf_analyzer import install_perf_analyzer, measure_model

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_command  # noqa: E402

HERE = Path(__file__).resolve().parent
MODEL = "add_sub"
SOURCE = ROOT / "examples" / "python_model_repository" / MODEL
HTTP_TARGET, HTTP_TARGET_HIGH, HIGH_FROM, GRPC_TARGET = 1.0, 1.5, 16, 0.9
THREAD_GRPC_TARGET, THREAD_CPU_TARGET = 1.0, 0.5  # thread mode: of Triton's infer/s, of its CPU per request
CEILINGS = {"http": "http-echo", "grpc": "grpc-echo"}  # protocol -> the bare server that bounds it
TRACED_TARGET = 0.9  # tracing every request keeps at least this much of the untraced throughput


@dataclass
class Run:
    """One server started once per round (with its traced twin, if any), and what it serves."""

    name: str
    protocols: tuple[str, ...]
    flags: tuple[str, ...] = ()  # Nereid's extra flags (--nereid-flag, --traced)
    rates: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu_us: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # per request
    client_us: dict[tuple[str, int], list[float]] = field(
        default_factory=dict
    )  # perf_analyzer's, per request
    batch_sizes: list[float] = field(default_factory=list)


def batched_repository(root: Path) -> Path:
    shutil.copytree(SOURCE, root / MODEL)
    config = root / MODEL / "config.pbtxt"
    config.write_text(config.read_text() + "dynamic_batching { }\n")
    return root


def start_server(
    name: str,
    repository: Path,
    http_port: int,
    grpc_port: int,
    processes: int = 1,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """`processes`: how many processes the HTTP ceiling runs; `extra`: Nereid's extra flags."""
    if name.startswith("nereid"):
        mode = name.removesuffix("+trace").partition("-")[2]
        flags = (f"--backend-config=python,execution-mode={mode}",) if mode else ()
        # The native gRPC core, which serves only with deflate requests refused.
        process = start_nereid(
            http_port,
            repository,
            grpc_port,
            "--grpc-request-compression=gzip",
            "--allow-client-shm=true",  # as Triton 2.51 allows regions by default
            *flags,
            *extra,
        )
    elif name == "triton":
        command, env = triton_command(repository, http_port, grpc_port)
        process = start(command, "triton", env)
    elif name == "http-echo":
        process = start(
            [
                sys.executable,
                "-I",
                str(HERE / "http_infer_echo_app.py"),
                str(http_port),
                MODEL,
                str(processes),
            ],
            "http-echo",
        )
        wait_port(http_port, process)
        return process
    else:
        process = start(
            [sys.executable, "-I", str(HERE / "grpc_echo_app.py"), str(grpc_port), MODEL], "grpc-echo"
        )
        wait_port(grpc_port, process)
        return process
    wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", process, timeout=120)
    return process


def trace_flags(file: Path) -> tuple[str, ...]:
    """Every request traced at TIMESTAMPS level, written to `file.N` every 1000 traces, as Triton's
    QA runs it: the cost of tracing itself, file writes included."""
    return (
        f"--trace-config=triton,file={file}",
        "--trace-config=triton,log-frequency=1000",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    )


def average_batch(http_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    return stats["inference_count"] / max(1, stats["execution_count"])


def measure(
    group: list[Run],
    repository: Path,
    concurrencies: list[int],
    tool: tuple[Path, Path],
    args: argparse.Namespace,
) -> None:
    """Start every server of `group` (one, or a traced twin with its untraced server), then measure them
    cell by cell in the group's order: twins are measured seconds apart at each cell, the other idle."""
    started: list[tuple[Run, int, subprocess.Popen[bytes], dict[str, list[str]]]] = []  # with HTTP port
    try:
        for run in group:
            http_port, grpc_port = free_port(), free_port()
            while grpc_port == http_port:
                grpc_port = free_port()
            targets = {
                "http": ["-u", f"127.0.0.1:{http_port}"],
                "grpc": ["-i", "grpc", "-u", f"127.0.0.1:{grpc_port}"],
            }
            process = start_server(
                run.name, repository, http_port, grpc_port, args.ceiling_processes, run.flags
            )
            started.append((run, http_port, process, targets))
        for protocol in group[0].protocols:
            for concurrency in concurrencies:
                for run, http_port, process, targets in started:
                    measure_cell(
                        run, http_port, process.pid, targets[protocol], protocol, concurrency, tool, args
                    )
        for run, http_port, _, _ in started:
            if run.name not in CEILINGS.values():
                run.batch_sizes.append(average_batch(http_port))
    finally:
        for _, _, process, _ in started:
            stop(process)


def measure_cell(
    run: Run,
    http_port: int,
    pid: int,
    target: list[str],
    protocol: str,
    concurrency: int,
    tool: tuple[Path, Path],
    args: argparse.Namespace,
) -> None:
    """One perf_analyzer measurement of one server at one concurrency: infer/s, and CPU per request of the
    server and of perf_analyzer."""
    served = run.name not in CEILINGS.values()  # the ceilings keep no statistics
    with cpu_per_request(
        pid, (lambda: completed_requests(http_port, MODEL)) if served else (lambda: 1)
    ) as cpu:
        extra = ("--shared-memory", args.shared_memory) if args.shared_memory != "none" else ()
        (row,) = measure_model(*tool, MODEL, target, f"{concurrency}:{concurrency}:1", args, extra)
    key = (protocol, concurrency)
    run.rates.setdefault(key, []).append(float(row["Inferences/Second"]))
    if served:
        run.cpu_us.setdefault(key, []).append(cpu.microseconds)
        run.client_us.setdefault(key, []).append(cpu.client_microseconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", default="1,4,16,64", help="comma-separated concurrencies")
    parser.add_argument("--interval-ms", type=int, default=3000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument("--stability", type=int, default=100, help="perf_analyzer stability percent")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every server, alternating")
    parser.add_argument("--protocol", action="append", choices=("http", "grpc"), help="default: both")
    parser.add_argument("--modes", default="process,thread", help="Nereid's Python execution modes to run")
    parser.add_argument(
        "--ceiling-processes", type=int, default=1, help="uvicorn processes of the HTTP ceiling (default 1)"
    )
    parser.add_argument(
        "--shared-memory",
        choices=("none", "system"),
        default="none",
        help="where perf_analyzer puts the tensors: in the request body, or in system shared memory regions",
    )
    parser.add_argument(
        "--nereid-flag",
        action="append",
        default=[],
        help="a flag for every Nereid's command line (repeatable)",
    )
    parser.add_argument(
        "--traced",
        action="store_true",
        help="also run each Nereid mode tracing every request (rate 1, TIMESTAMPS, a trace file)",
    )
    parser.add_argument("--json", type=Path, help="also write every round's figures to this file")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    protocols = tuple(args.protocol or ("http", "grpc"))
    tool = install_perf_analyzer()
    if args.shared_memory == "none":  # the bare ceilings' servers (uvloop under both)
        ensure_modules(
            ("uvicorn", "uvicorn"), ("uvloop", "uvloop"), ("httptools", "httptools"), ("orjson", "orjson")
        )
    nereid_flags = tuple(args.nereid_flag)
    runs = [
        Run("nereid" if m == "process" else f"nereid-{m}", protocols, flags=nereid_flags)
        for m in args.modes.split(",")
    ]
    runs.append(Run("triton", protocols))
    if args.shared_memory == "none":  # the bare ceilings register no regions
        runs.extend(Run(CEILINGS[p], (p,)) for p in protocols)
    with tempfile.TemporaryDirectory(prefix="nereid-bench-batching-") as tmp:
        if args.traced:  # each traced server beside its untraced one: a pair measured cell by cell
            paired: list[Run] = []
            for r in runs:
                paired.append(r)
                if r.name.startswith("nereid"):
                    flags = trace_flags(Path(tmp) / f"{r.name}.trace.json")
                    paired.append(Run(f"{r.name}+trace", protocols, flags=(*nereid_flags, *flags)))
            runs = paired
        repository = batched_repository(Path(tmp) / "repository")
        for round_ in range(args.rounds):
            for group in round_order(runs, round_):
                try:
                    measure(group, repository, concurrencies, tool, args)
                except (RuntimeError, subprocess.CalledProcessError) as exc:
                    print(f"FAILED on {' and '.join(r.name for r in group)}: {exc}", file=sys.stderr)
                    return 1
            line = "  ".join(
                f"{r.name} {p} c{c}={r.rates[(p, c)][-1]:.0f}"
                + (f"/{r.cpu_us[(p, c)][-1]:.0f}us" if (p, c) in r.cpu_us else "")
                for r in runs
                for (p, c) in r.rates
            )
            print(f"round {round_ + 1}: {line}", flush=True)
    report(runs, protocols, concurrencies, args.shared_memory)
    if args.json:
        write_json(args.json, runs, args)
    return 0


def write_json(path: Path, runs: list[Run], args: argparse.Namespace) -> None:
    """Every round's figures, per server, protocol and concurrency, for bench/plot_performance.py."""
    cells = [
        {
            "server": run.name,
            "protocol": protocol,
            "concurrency": concurrency,
            "infer_per_sec": rates,
            "cpu_us": run.cpu_us.get((protocol, concurrency), []),
            "client_cpu_us": run.client_us.get((protocol, concurrency), []),
        }
        for run in runs
        for (protocol, concurrency), rates in run.rates.items()
    ]
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    batches = {r.name: r.batch_sizes for r in runs if r.batch_sizes}
    host = {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(), "python": sys.version.split()[0]}
    document = {"benchmark": "dynamic_batching", "model": MODEL, "settings": settings, "host": host}
    path.write_text(json.dumps({**document, "cells": cells, "average_batch": batches}, indent=1) + "\n")


def round_order(runs: list[Run], round_: int) -> list[list[Run]]:
    """The servers of a round, in the order they run: each traced server in one group with its untraced
    one, measured one after the other at each cell; every other round the traced one first, so that a
    drift of the host's load does not always favour the same one."""
    groups: list[list[Run]] = []
    for run in runs:
        if run.name.endswith("+trace") and groups:
            groups[-1].insert(0 if round_ % 2 else 1, run)
        else:
            groups.append([run])
    return groups


def report(
    runs: list[Run], protocols: tuple[str, ...], concurrencies: list[int], shared_memory: str = "none"
) -> None:
    by_name = {r.name: r for r in runs}
    triton = by_name["triton"]
    nereids = [r for r in runs if r.name.startswith("nereid")]
    median = {(r.name, key): statistics.median(rates) for r in runs for key, rates in r.rates.items()}
    cpu = {(r.name, key): statistics.median(us) for r in runs for key, us in r.cpu_us.items()}
    client = {(r.name, key): statistics.median(us) for r in runs for key, us in r.client_us.items()}
    tensors = "tensors in system shared memory" if shared_memory == "system" else "tensors in the body"
    print(
        f"\nmodel {MODEL} (Python backend, FP32 [16], max_batch_size 64, dynamic_batching), {tensors},"
        " median infer/s, CPU us per request (all the server's processes; 'pa us': perf_analyzer's, against"
        " each server), per-round range of nereid/triton:"
    )
    print(
        f"  {'server':<13} {'protocol':<8} {'conc':>4} {'infer/s':>9} {'triton':>9} {'ceiling':>9}"
        f" {'n/triton':>9} {'rounds':>10} {'n/ceiling':>9} {'c/triton':>9} {'cpu us':>7} {'triton us':>9}"
        f" {'cpu ratio':>9} {'pa us':>5} {'t pa us':>7}"
    )
    met = True
    for run in nereids:
        thread = "thread" in run.name
        for protocol in protocols:
            for c in concurrencies:
                key = (protocol, c)
                n, t = median[(run.name, key)], median[("triton", key)]
                ceiling = median.get((CEILINGS[protocol], key), float("nan"))  # nan: no ceiling run
                per_round = sorted(a / b for a, b in zip(run.rates[key], triton.rates[key], strict=True))
                cpu_n, cpu_t = cpu[(run.name, key)], cpu[("triton", key)]
                line = (
                    f"  {run.name:<13} {protocol:<8} {c:>4} {n:>9.0f} {t:>9.0f} {ceiling:>9.0f} {n / t:>9.2f}"
                )
                line += f" {per_round[0]:>4.2f}-{per_round[-1]:<4.2f} {n / ceiling:>9.2f} {ceiling / t:>9.2f}"
                line += f" {cpu_n:>7.0f} {cpu_t:>9.0f} {cpu_n / cpu_t:>9.2f}"
                line += f" {client[(run.name, key)]:>5.0f} {client[('triton', key)]:>7.0f}"
                checks = targets(protocol, c, thread, n / t, n / ceiling, cpu_n / cpu_t)
                if shared_memory != "none":
                    checks = []  # the targets are for tensors in the body
                for name, ok in checks:
                    met &= ok
                    line += f"  {name} {'met' if ok else 'NOT met'}"
                print(line)
    report_tracing(runs, cpu)
    sizes = ", ".join(f"{r.name} {statistics.mean(r.batch_sizes):.1f}" for r in [*nereids, triton])
    print(f"  average batch size over a whole run: {sizes}")
    if shared_memory != "none":
        print("no targets: they are for tensors in the body")
    else:
        print("all targets met" if met else "some targets NOT met")


def targets(
    protocol: str, concurrency: int, thread: bool, of_triton: float, of_ceiling: float, cpu_of_triton: float
) -> list[tuple[str, bool]]:
    """The targets of one cell, each with whether it is met."""
    checks = []
    if protocol == "http":
        target = HTTP_TARGET_HIGH if concurrency >= HIGH_FROM else HTTP_TARGET
        checks.append((f"{target:.1f}x triton", of_triton >= target))
    elif thread:
        if concurrency == HIGH_FROM:
            checks.append((f"{THREAD_GRPC_TARGET:.1f}x triton", of_triton >= THREAD_GRPC_TARGET))
    else:
        checks.append((f"{GRPC_TARGET:.1f}x ceiling", of_ceiling >= GRPC_TARGET))
    if thread:
        checks.append((f"cpu <= {THREAD_CPU_TARGET:.1f}x triton", cpu_of_triton <= THREAD_CPU_TARGET))
    return checks


def report_tracing(runs: list[Run], cpu: dict[tuple[str, tuple[str, int]], float]) -> None:
    """Tracing's cost, cell by cell: the traced server's infer/s over the untraced one's and its extra CPU
    per request, each taken within one round (the two measured one after the other), as the median over
    the rounds with their range. Pairing within a round cancels most of what a busy host's load does to
    both servers alike, which medians of each server on its own do not."""
    by_name = {r.name: r for r in runs}
    traced_runs = [r for r in runs if r.name.endswith("+trace")]
    if not traced_runs:
        return
    print(
        f"\ntracing at rate 1 (TIMESTAMPS, a trace file every 1000 traces): 'kept' is the traced server's"
        f" infer/s over the untraced one's in the same round, median over the rounds and range; 'extra us'"
        f" the CPU per request traced minus untraced, likewise; the target: kept >= {TRACED_TARGET:.2f}"
    )
    print(
        f"  {'server':<13} {'protocol':<8} {'conc':>4} {'kept':>5} {'range':<11} {'extra us':>8}"
        f" {'range':<13} {'untraced us':>11} {'rounds':>6}"
    )
    met = True
    for run in traced_runs:
        base = by_name[run.name.removesuffix("+trace")]
        for key, rates in run.rates.items():
            kept = sorted(t / u for t, u in zip(rates, base.rates[key], strict=True))
            extra = sorted(t - u for t, u in zip(run.cpu_us[key], base.cpu_us[key], strict=True))
            ok = statistics.median(kept) >= TRACED_TARGET
            met &= ok
            kept_range = f"{kept[0]:.2f}-{kept[-1]:.2f}"
            extra_range = f"{extra[0]:+.1f}..{extra[-1]:+.1f}"
            print(
                f"  {base.name:<13} {key[0]:<8} {key[1]:>4} {statistics.median(kept):>5.2f} {kept_range:<11}"
                f" {statistics.median(extra):>+8.1f} {extra_range:<13} {cpu[(base.name, key)]:>11.1f}"
                f" {len(kept):>6}  {'met' if ok else 'NOT met'}"
            )
    verdict = "costs" if met else "does NOT cost"
    print(f"  tracing {verdict} less than {1 - TRACED_TARGET:.0%} of the throughput in every cell")


if __name__ == "__main__":
    sys.exit(main())
