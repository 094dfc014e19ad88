"""`nereid analyze`'s command line -> AnalyzeSettings."""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nereid.analyze.measure import WindowRules
from nereid.analyze.space import Choices

# perf_analyzer is found by this flag, else this environment variable, else on PATH.
PERF_ANALYZER_ENV = "NEREID_PERF_ANALYZER"


@dataclass(frozen=True)
class AnalyzeSettings:
    repository: Path
    models: tuple[str, ...]
    output: Path
    report: Path
    search: str
    budget_s: float | None
    latency_budget_ms: float | None
    min_throughput: float
    protocol: str
    concurrencies: tuple[int, ...]
    input_data: str
    shapes: dict[str, tuple[int, ...]]
    choices: Choices
    rules: WindowRules
    perf_analyzer: str | None  # None: the built-in load generator
    url: str | None  # a running server instead of one started here
    grpc_url: str | None
    server_pid: int | None
    runners_up: int


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got '{text}'") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected numbers of 0 or more, got '{text}'")
    return values


def _positive_ints(text: str) -> tuple[int, ...]:
    values = _ints(text)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected numbers of 1 or more, got '{text}'")
    return values


def _words(allowed: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(x.strip().lower() for x in text.split(",") if x.strip())
        wrong = [v for v in values if v not in allowed]
        if not values or wrong:
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed)}, got '{text}'")
        return values

    return parse


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.rpartition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME:d1,d2,..., got '{text}'")
    return name, _positive_ints(dims)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nereid analyze",
        description="Search a model's configuration (instances, batching, Python execution mode, ONNX Runtime "
        "threads) for the best throughput within a latency budget, on a running Nereid.",
        allow_abbrev=False,
    )
    p.add_argument("--model-repository", required=True, type=Path, metavar="DIR")
    p.add_argument("--model", action="append", required=True, metavar="NAME", help="repeatable")
    p.add_argument(
        "--output-repository",
        required=True,
        type=Path,
        metavar="OUT",
        help="where the best config of each model is written, as model folders that serve as they are",
    )
    p.add_argument("--report-dir", required=True, type=Path, metavar="REPORT")
    p.add_argument("--search", choices=("quick", "brute"), default="quick")
    p.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        metavar="N",
        help="stop measuring after N minutes (the report covers what was measured)",
    )
    p.add_argument("--latency-budget-ms", type=float, default=None, metavar="X", help="on p99 latency")
    p.add_argument("--min-throughput", type=float, default=0.0, metavar="N", help="infer/s")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--concurrency", type=_positive_ints, default=(1, 4, 16, 64), metavar="1,4,16,64")
    p.add_argument("--input-data", default="zero", metavar="zero|random|FILE")
    p.add_argument(
        "--shape",
        type=_shape,
        action="append",
        default=[],
        metavar="NAME:d1,d2",
        help="the shape of an input with variable dimensions (without the batch dimension)",
    )
    p.add_argument("--instance-counts", type=_positive_ints, default=Choices.instances, metavar="1,2,4")
    p.add_argument("--max-batch-sizes", type=_positive_ints, default=Choices.max_batch_sizes, metavar="8,32")
    p.add_argument("--queue-delays-us", type=_ints, default=Choices.queue_delays_us, metavar="0,1000")
    p.add_argument(
        "--preferred-batch-sizes",
        type=_words(("max", "half")),
        default=Choices.preferred,
        metavar="max,half",
        help="max: full batches (none set), half: half the max batch size",
    )
    p.add_argument("--dynamic-batching", type=_words(("off", "on")), default=("off", "on"), metavar="off,on")
    p.add_argument(
        "--execution-modes",
        type=_words(("process", "thread")),
        default=Choices.execution_modes,
        metavar="process,thread",
        help="of Python models",
    )
    p.add_argument(
        "--intra-op-threads",
        type=_ints,
        default=Choices.intra_op_threads,
        metavar="1,2",
        help="of ONNX Runtime models (0: Nereid's own choice)",
    )
    p.add_argument("--window-ms", type=int, default=1000, help="length of a measurement window")
    p.add_argument("--stability-percent", type=float, default=20.0)
    p.add_argument("--max-windows", type=int, default=10)
    p.add_argument(
        "--load-generator",
        choices=("auto", "perf_analyzer", "builtin"),
        default="auto",
        help="auto: perf_analyzer where it is installed, the built-in one otherwise",
    )
    p.add_argument(
        "--perf-analyzer",
        default=None,
        metavar="PATH",
        help=f"perf_analyzer's path (else ${PERF_ANALYZER_ENV}, else PATH)",
    )
    p.add_argument(
        "--url",
        default=None,
        metavar="HOST:PORT",
        help="analyze on this running Nereid (explicit model-control mode) instead of starting one",
    )
    p.add_argument("--grpc-url", default=None, metavar="HOST:PORT", help="with --url and --protocol grpc")
    p.add_argument("--server-pid", type=int, default=None, help="with --url: its process, for CPU and memory")
    p.add_argument("--runners-up", type=int, default=3, help="how many next best configs to keep")
    return p


def _perf_analyzer(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    if args.load_generator == "builtin":
        return None
    named = args.perf_analyzer or environ.get(PERF_ANALYZER_ENV) or shutil.which("perf_analyzer")
    if named is None and args.load_generator == "perf_analyzer":
        raise SystemExit(
            f"nereid analyze: no perf_analyzer: give --perf-analyzer PATH or set {PERF_ANALYZER_ENV}"
        )
    return named


def parse_settings(argv: Sequence[str], environ: dict[str, str] | None = None) -> AnalyzeSettings:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.model_repository.is_dir():
        parser.error(f"--model-repository: no folder '{args.model_repository}'")
    if args.protocol == "grpc" and args.url and not args.grpc_url:
        parser.error("--protocol grpc with --url needs --grpc-url")
    choices = Choices(
        instances=args.instance_counts,
        max_batch_sizes=args.max_batch_sizes,
        queue_delays_us=args.queue_delays_us,
        preferred=args.preferred_batch_sizes,
        execution_modes=args.execution_modes,
        intra_op_threads=args.intra_op_threads,
        dynamic_batching=tuple(v == "on" for v in args.dynamic_batching),
    )
    return AnalyzeSettings(
        repository=args.model_repository.resolve(),
        models=tuple(dict.fromkeys(args.model)),
        output=args.output_repository,
        report=args.report_dir,
        search=args.search,
        budget_s=args.budget_minutes * 60 if args.budget_minutes is not None else None,
        latency_budget_ms=args.latency_budget_ms,
        min_throughput=args.min_throughput,
        protocol=args.protocol,
        concurrencies=tuple(sorted(set(args.concurrency))),
        input_data=args.input_data,
        shapes=dict(args.shape),
        choices=choices,
        rules=WindowRules(args.window_ms / 1000, 3, args.stability_percent / 100, args.max_windows),
        perf_analyzer=_perf_analyzer(args, dict(os.environ) if environ is None else environ),
        url=args.url,
        grpc_url=args.grpc_url,
        server_pid=args.server_pid,
        runners_up=args.runners_up,
    )


def main(argv: Sequence[str]) -> int:
    settings = parse_settings(argv)
    from nereid.analyze.run import analyze

    return analyze(settings)
