"""perf_analyzer -i grpc: Nereid on each gRPC core next to the real Triton and next to a bare grpc.aio server,
with the CPU time every server spends per request, and servers spread over processes sharing the port.

Servers (--servers), each started afresh per round, the rounds alternating them:
  nereid-native, nereid-aio            Nereid on pygrpc-native (with --grpc-request-compression=gzip, which
                                       it needs) or on grpc.aio; `nereid-thread-...`: Python models in
                                       the server process (execution mode thread)
  triton                               the real Triton 2.51
  ceiling, ceiling-native              grpc_echo_app.py: a bare grpc.aio (or pygrpc-native) server
                                       answering every ModelInfer with a fixed response, the most a Python
                                       gRPC server on that core can do
  any of them with -xN                 N processes on one port (SO_REUSEPORT): N independent Nereids, each
                                       with its own HTTP port and model instances, or N echo workers
                                       (grpcio's multiprocessing pattern); not for triton

Models (--model): `simple` (Nereid: ONNX from the examples; Triton: its Python-backend twin) or `add_sub`
(Python, FP32 [16], one instance, the same repository for both; --batching adds `dynamic_batching { }`).

perf_analyzer runs at each concurrency, once per channel sharing of --share (`default`: its client shares a
gRPC channel, so one connection, among up to 6 contexts; `1`: TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1,
a connection per context, which the kernel spreads over the processes of a -xN server). Per measurement:
infer/s, p50, CPU microseconds per request (every process of the server, from /proc, over the
measurement, per request the server's statistics count in it), the busiest single thread's CPU per
request (1e6 / that bounds one process's rate), the average batch size (inference / execution counts over
the measurement) and, per run, the sum of VmHWM over the server's processes. Reports medians over the
rounds with the per-round range, nereid/triton and nereid/ceiling, and the gain of each -xN server over
its one-process run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from _common import EXAMPLES, ROOT, free_port, log_tail, start, start_nereid, stop, wait_ready
from cpu import thread_cpu_seconds, tree_cpu_seconds, tree_peak_rss_mib
from perf_analyzer import TWIN, install_perf_analyzer, measure_model
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_command  # noqa: E402

HERE = Path(__file__).resolve().parent
ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"
CORE_FLAGS = {
    "native": ("--grpc-core=native", "--grpc-request-compression=gzip"),
    "aio": ("--grpc-core=aio",),
}
SHARE_ENV = {"default": {}, "1": {"TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT": "1"}}


@dataclass(frozen=True)
class ServerSpec:
    """A --servers entry: `nereid[-thread]-native|aio[-xN]`, `triton`, `ceiling[-native][-xN]`."""

    name: str
    kind: str  # nereid, triton or ceiling
    mode: str = "process"  # Nereid's Python execution mode
    core: str = ""  # Nereid's gRPC core
    processes: int = 1

    @classmethod
    def parse(cls, name: str) -> ServerSpec:
        base, _, count = name.partition("-x")
        processes = int(count) if count else 1
        parts = base.split("-")
        if parts == ["triton"] and processes == 1:
            return cls(name, "triton")
        if parts[0] == "ceiling" and len(parts) <= 2:
            core = parts[1] if len(parts) == 2 else "aio"
            if core in CORE_FLAGS:
                return cls(name, "ceiling", core=core, processes=processes)
        if parts[0] == "nereid" and len(parts) in (2, 3) and parts[-1] in CORE_FLAGS:
            mode = parts[1] if len(parts) == 3 else "process"
            if mode in ("process", "thread"):
                return cls(name, "nereid", mode, parts[-1], processes)
        raise argparse.ArgumentTypeError(f"unknown server '{name}'")

    @property
    def single(self) -> str:
        """The name of this server in one process."""
        return self.name.partition("-x")[0]


@dataclass
class Counts:
    """What a server's statistics say it has done so far, summed over its processes."""

    success: int
    inferences: int
    executions: int


@dataclass
class Running:
    processes: list[subprocess.Popen[bytes]]
    grpc_port: int
    counts: Callable[[], Counts]


@dataclass
class Sample:
    rate: float
    p50_ms: float
    cpu_us: float  # all processes, per request
    busiest_us: float  # the busiest thread, per request
    batch: float


@dataclass
class Results:
    samples: dict[tuple[str, str, int], list[Sample]] = field(default_factory=dict)  # (server, share, c)
    peak_rss_mib: dict[str, list[float]] = field(default_factory=dict)


def http_counts(ports: list[int], model: str) -> Callable[[], Counts]:
    def read() -> Counts:
        total = Counts(0, 0, 0)
        for port in ports:
            url = f"http://127.0.0.1:{port}/v2/models/{model}/stats"
            with urllib.request.urlopen(url, timeout=10) as response:
                for stats in json.load(response)["model_stats"]:
                    total.success += int(stats["inference_stats"]["success"]["count"])
                    total.inferences += int(stats["inference_count"])
                    total.executions += int(stats["execution_count"])
        return total

    return read


def echo_counts(grpc_port: int, model: str) -> Callable[[], Counts]:
    def read() -> Counts:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            (stats,) = stub.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10).model_stats
        count = stats.inference_stats.success.count
        return Counts(count, count, count)

    return read


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


def wait_lines(process: subprocess.Popen[bytes], text: str, count: int, timeout: float = 30.0) -> None:
    """Wait until the server's log holds `count` lines with `text` (each worker of a -xN ceiling listens)."""
    deadline = time.monotonic() + timeout
    path = Path(process.log_path)  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited ({process.returncode}):\n{log_tail(process)}")
        if path.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{count} x '{text}' not logged after {timeout:.0f}s:\n{log_tail(process)}")


def start_server(spec: ServerSpec, model: str, repository: Path) -> Running:
    grpc_port = free_port()
    if spec.kind == "ceiling":
        process = start(
            [
                sys.executable,
                "-I",
                str(HERE / "grpc_echo_app.py"),
                str(grpc_port),
                model,
                str(spec.processes),
                spec.core,
            ],
            "grpc-echo",
        )
        running = Running([process], grpc_port, echo_counts(grpc_port, model))
        wait_lines(process, "echo gRPC server on", spec.processes)
        return running
    if spec.kind == "triton":
        http_port = free_port()
        command, env = triton_command(repository, http_port, grpc_port)
        process = start(command, "triton", env)
        running = Running([process], grpc_port, http_counts([http_port], model))
        try:
            wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", process, timeout=120)
        except RuntimeError:
            stop(process)
            raise
        return running
    nereid_repository = EXAMPLES if model == "simple" else repository
    flags = [*CORE_FLAGS[spec.core]]
    if spec.mode != "process":
        flags.append(f"--backend-config=python,execution-mode={spec.mode}")
    if spec.processes > 1:
        flags.append("--reuse-grpc-port=true")
    http_ports = [free_port() for _ in range(spec.processes)]
    running = Running([], grpc_port, http_counts(http_ports, model))
    try:
        for port in http_ports:
            running.processes.append(start_nereid(port, nereid_repository, grpc_port, *flags))
        for port, process in zip(http_ports, running.processes, strict=True):
            wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
    except RuntimeError:
        for process in running.processes:
            stop(process)
        raise
    return running


def measure_once(
    running: Running,
    model: str,
    share: str,
    concurrency: int,
    tool: tuple[Path, Path],
    args: argparse.Namespace,
) -> Sample:
    roots = [p.pid for p in running.processes]
    before_counts, before_cpu, before_threads = (
        running.counts(),
        tree_cpu_seconds(*roots),
        thread_cpu_seconds(*roots),
    )
    (row,) = measure_model(
        *tool,
        model,
        ["-i", "grpc", "-u", f"127.0.0.1:{running.grpc_port}"],
        f"{concurrency}:{concurrency}:1",
        args,
        attempts=6,  # a busy shared host: more tries at a stable window before the run gives up
        environment=SHARE_ENV[share],
    )
    after_threads, after_cpu, after_counts = (
        thread_cpu_seconds(*roots),
        tree_cpu_seconds(*roots),
        running.counts(),
    )
    requests = max(1, after_counts.success - before_counts.success)
    busiest = max(
        (seconds - before_threads.get(thread, 0.0) for thread, seconds in after_threads.items()), default=0.0
    )
    executions = after_counts.executions - before_counts.executions
    return Sample(
        rate=float(row["Inferences/Second"]),
        p50_ms=int(row["p50 latency"]) / 1000,
        cpu_us=(after_cpu - before_cpu) * 1e6 / requests,
        busiest_us=busiest * 1e6 / requests,
        batch=(after_counts.inferences - before_counts.inferences) / max(1, executions),
    )


def run_server(
    spec: ServerSpec, repository: Path, tool: tuple[Path, Path], args: argparse.Namespace, results: Results
) -> None:
    try:
        running = start_server(spec, args.model, repository)
    except RuntimeError as exc:
        raise RuntimeError(f"{spec.name}: {exc}") from None
    try:
        for share in args.share:
            for concurrency in args.concurrency:
                sample = measure_once(running, args.model, share, concurrency, tool, args)
                results.samples.setdefault((spec.name, share, concurrency), []).append(sample)
        results.peak_rss_mib.setdefault(spec.name, []).append(
            tree_peak_rss_mib(*(p.pid for p in running.processes))
        )
    finally:
        for process in running.processes:
            stop(process)


def last_samples(spec: ServerSpec, args: argparse.Namespace, results: Results) -> str:
    """infer/s and CPU us per request of the server's latest run."""
    latest = {
        (share, c): results.samples[(spec.name, share, c)][-1]
        for share in args.share
        for c in args.concurrency
    }
    return "  ".join(f"{share}/c{c}={s.rate:.0f}@{s.cpu_us:.0f}us" for (share, c), s in latest.items())


def prepare_repository(root: Path, model: str, batching: bool) -> Path:
    """The repository Triton serves (and Nereid too, for add_sub)."""
    if model == "simple":
        shutil.copytree(TWIN, root / "simple")
    else:
        shutil.copytree(ADD_SUB, root / "add_sub")
        if batching:
            config = root / "add_sub" / "config.pbtxt"
            config.write_text(config.read_text() + "dynamic_batching { }\n")
    return root


def ceiling_of(spec: ServerSpec, core: str = "") -> str:
    """The bare server on `core` (default: the Nereid's own) with as many processes as `spec`."""
    core = core or spec.core
    name = "ceiling" if core == "aio" else f"ceiling-{core}"
    return name if spec.processes == 1 else f"{name}-x{spec.processes}"


def span(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def report(specs: list[ServerSpec], args: argparse.Namespace, results: Results) -> None:
    print(
        f"\nperf_analyzer -i grpc -m {args.model}{' (dynamic_batching)' if args.batching else ''}, batch 1:"
        f" median [lowest-highest] of {args.rounds} rounds; cpu us: all the server's processes per request;"
        " busiest: its busiest thread per request; VmHWM: summed over its processes"
    )
    print(
        f"  {'server':<24} {'share':>7} {'conc':>4} {'infer/s':>20} {'p50 ms':>6} {'cpu us':>18}"
        f" {'busiest us':>10} {'batch':>5} {'VmHWM MiB':>9}"
    )
    for spec in specs:
        for share in args.share:
            for c in args.concurrency:
                samples = results.samples[(spec.name, share, c)]
                print(
                    f"  {spec.name:<24} {share:>7} {c:>4} {span([s.rate for s in samples]):>20}"
                    f" {statistics.median(s.p50_ms for s in samples):>6.2f}"
                    f" {span([s.cpu_us for s in samples]):>18}"
                    f" {statistics.median(s.busiest_us for s in samples):>10.0f}"
                    f" {statistics.median(s.batch for s in samples):>5.1f}"
                    f" {statistics.median(results.peak_rss_mib[spec.name]):>9.0f}"
                )
    names = {spec.name for spec in specs}

    def ratios(a: str, b: str, share: str, c: int, value: Callable[[Sample], float]) -> list[float]:
        return [
            value(x) / value(y)
            for x, y in zip(results.samples[(a, share, c)], results.samples[(b, share, c)], strict=True)
        ]

    comparisons = [  # nereid/triton, nereid/its core's ceiling, nereid/grpc.aio's ceiling, -xN/x1
        (spec.name, other)
        for spec in specs
        if spec.kind == "nereid"
        for other in ("triton", ceiling_of(spec), ceiling_of(spec, "aio"))
        if other in names
    ]
    comparisons += [(spec.name, spec.single) for spec in specs if spec.processes > 1 and spec.single in names]
    comparisons = list(dict.fromkeys(comparisons))
    if comparisons:
        print("  ratios within a round, median [lowest-highest]: infer/s, then cpu us per request")
    for a, b in comparisons:
        for share in args.share:
            for c in args.concurrency:
                rate = ratios(a, b, share, c, lambda s: s.rate)
                cpu = ratios(a, b, share, c, lambda s: s.cpu_us)
                print(f"  {a + '/' + b:<40} {share:>7} {c:>4} {span(rate, 2):>18} {span(cpu, 2):>18}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--servers",
        type=ServerSpec.parse,
        nargs="+",
        default=[ServerSpec.parse(n) for n in ("nereid-native", "nereid-aio", "ceiling", "triton")],
    )
    parser.add_argument("--model", choices=("simple", "add_sub"), default="simple")
    parser.add_argument("--batching", action="store_true", help="add_sub with dynamic_batching { }")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--share", nargs="+", choices=sorted(SHARE_ENV), default=["default"])
    parser.add_argument("--interval-ms", type=int, default=3000, help="measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument("--stability", type=int, default=100, help="perf_analyzer stability percent")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all servers")
    args = parser.parse_args()
    if args.model == "simple" and any(s.kind == "nereid" and s.mode != "process" for s in args.servers):
        parser.error("execution modes apply to the Python model add_sub")

    tool = install_perf_analyzer()
    results = Results()
    try:
        with tempfile.TemporaryDirectory(prefix="nereid-bench-grpc-") as tmp:
            repository = prepare_repository(Path(tmp), args.model, args.batching)
            for round_ in range(args.rounds):
                # Each round in the other order, so that a slow spell of the shared machine hits every server.
                for spec in args.servers if round_ % 2 == 0 else args.servers[::-1]:
                    run_server(spec, repository, tool, args, results)
                    print(f"round {round_ + 1} {spec.name}: {last_samples(spec, args, results)}", flush=True)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    report(args.servers, args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
