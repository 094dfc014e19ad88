"""`nereid analyze`: quick search against brute search, and against Triton's Model Analyzer.

Each round runs `--search brute` and `--search quick` over the same space (alternating which goes
first), and prints, side by side: candidates measured, the best throughput within the latency budget,
the chosen settings and the wall time. Runs on a shared host differ from each other by more than
settings do, so each round also prints quick's pick as brute measured it in the same round, and then
measures the two picks again, each served from the folder its search wrote, in alternating rounds
(`--confirm-rounds`): medians of throughput within the budget and of CPU per inference. Brute's best is
the highest of twelve noisy figures, so the picks measured again are the fair comparison.

With `--model-analyzer PATH`, Model Analyzer's brute search profiles the same model on Nereid (local
launch mode, over gRPC, with its own measurement rule, or with `--ma-time-windows` the looser one of
docs/model_analyzer.md for a busy host) within its own small
space (instances 1-2, max batch size 1-4, concurrency 1-4), and `nereid analyze --search quick` runs
over that space, once as Model Analyzer has it and once with Nereid's execution modes added. Printed:
each tool's best and wall time.

    python bench/analyze_search.py --perf-analyzer PATH [--rounds 2] [--model-analyzer PATH [--skip-brute]]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, free_port, start_nereid, stop, wait_ready

from nereid.analyze.measure import WindowRules, parse_perf_analyzer_csv, perf_analyzer_command

ADD_SUB_REPOSITORY = ROOT / "examples" / "python_model_repository"
# The space of the closing figures: 2 instance counts x 2 execution modes x batching off, or on at 8
# or at the model's own 64: 12 candidates, of which quick measures at most 4.
SPACE = (
    "--instance-counts 1,2 --execution-modes process,thread --dynamic-batching off,on --max-batch-sizes 8 "
    "--queue-delays-us 0 --preferred-batch-sizes max --concurrency 1,4,16"
).split()
# Model Analyzer's automatic brute search with the flags below: the default config, and dynamic batching
# at max batch size 1, 2 and 4 with 1 or 2 instances, each at concurrency 1, 2 and 4.
MA_SPACE = (
    "--instance-counts 1,2 --dynamic-batching on --max-batch-sizes 1,2,4 --queue-delays-us 0 "
    "--preferred-batch-sizes max --concurrency 1,2,4 --protocol grpc"
).split()
MA_FLAGS = (
    "--run-config-search-max-instance-count 2 --run-config-search-max-model-batch-size 4 "
    "--run-config-search-max-concurrency 4"
).split()


def analyze(
    args: argparse.Namespace, search: str, space: list[str], work: Path, repository: Path | None = None
) -> dict[str, Any]:
    """One `nereid analyze` run: its report.json, with the wall time and the output repository added."""
    report = work / f"report-{search}-{time.monotonic_ns()}"
    command = [
        str(Path(sys.executable).parent / "nereid"),
        "analyze",
        "--model-repository",
        str(repository or args.model_repository),
        "--model",
        args.model,
        "--output-repository",
        str(report / "out"),
        "--report-dir",
        str(report),
        "--search",
        search,
        "--latency-budget-ms",
        str(args.latency_budget_ms),
        *(["--perf-analyzer", args.perf_analyzer] if args.perf_analyzer else []),
        *space,
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode not in (0, 3):  # 3: nothing met the budget, still a report
        sys.exit(f"nereid analyze --search {search} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    document = json.loads((report / "report.json").read_text())
    document["wall_s"] = wall
    document["out"] = str(report / "out")
    return document


def best(document: dict[str, Any]) -> tuple[float, str]:
    """The chosen candidate's throughput and settings (0 where nothing met the budget)."""
    rows = [r for r in document["candidates"] if r["key"] == document["chosen"]]
    if not rows:
        return 0.0, "nothing within the budget"
    return rows[0]["best"]["throughput"], rows[0]["describe"]


def measured_in(document: dict[str, Any], key: str | None) -> float:
    """How `key` fared in another run's measurements (0 where it was not measured or met nothing)."""
    for row in document["candidates"]:
        if row["key"] == key and row["best"]:
            return float(row["best"]["throughput"])
    return 0.0


# report.json's setting names, and the flags that pin each to one value
_FLAGS = {
    "instances": "--instance-counts",
    "execution_mode": "--execution-modes",
    "intra_op_threads": "--intra-op-threads",
    "dynamic_batching": "--dynamic-batching",
    "max_batch_size": "--max-batch-sizes",
    "queue_delay_us": "--queue-delays-us",
    "preferred": "--preferred-batch-sizes",
}


def pinned(key: str) -> list[str]:
    """Flags for a space of one candidate: `key`'s settings (of one model), each the only value tried."""
    flags = []
    for setting in key.split(": ", 1)[1].split():
        name, value = setting.split("=")
        flags += [_FLAGS[name], "0" if value == "auto" else value]
    return flags


def confirm(args: argparse.Namespace, runs: dict[str, dict[str, Any]], work: Path) -> tuple[float, float]:
    """Each search's pick measured again, served from the folder the search wrote, alternating rounds:
    the median throughput within the budget and CPU per inference of each, quick's over brute's."""
    concurrencies = ["--concurrency", SPACE[SPACE.index("--concurrency") + 1]]
    figures: dict[str, list[tuple[float, float]]] = {"quick": [], "brute": []}
    for round_ in range(args.confirm_rounds):
        order = ("brute", "quick") if round_ % 2 == 0 else ("quick", "brute")
        for search in order:
            run = runs[search]
            again = analyze(args, "brute", [*pinned(run["chosen"]), *concurrencies], work, Path(run["out"]))
            row = again["candidates"][0]
            figures[search].append(
                (row["best"]["throughput"], row["best"]["cpu_us_per_infer"]) if row["best"] else (0.0, 0.0)
            )
    for search in ("quick", "brute"):
        throughput = ", ".join(f"{t:,.0f}" for t, _ in figures[search])
        cpu = ", ".join(f"{c:.0f}" for _, c in figures[search])
        print(f"  {search}'s pick again: {throughput} infer/s; {cpu} CPU us per inference")
    quick_median = statistics.median(t for t, _ in figures["quick"])
    brute_median = statistics.median(t for t, _ in figures["brute"])
    cpu_ratio = statistics.median(c for _, c in figures["quick"]) / statistics.median(
        c for _, c in figures["brute"]
    )
    return (quick_median / brute_median if brute_median else 0.0), cpu_ratio


def line(name: str, document: dict[str, Any]) -> str:
    throughput, settings = best(document)
    return (
        f"  {name:6} {document['measured']:3d} of {document['space_size']:3d} candidates  "
        f"{throughput:9,.0f} infer/s  {document['wall_s']:6.0f} s  {settings}"
    )


def quick_against_brute(args: argparse.Namespace, work: Path) -> None:
    print(f"quick against brute: {args.model}, p99 within {args.latency_budget_ms} ms, {' '.join(SPACE)}")
    ratios, same_round, again = [], [], []
    for round_ in range(args.rounds):
        order = ("brute", "quick") if round_ % 2 == 0 else ("quick", "brute")
        runs = {search: analyze(args, search, SPACE, work) for search in order}
        print(f"round {round_ + 1}:")
        for search in order:
            print(line(search, runs[search]))
        quick_best, brute_best = best(runs["quick"])[0], best(runs["brute"])[0]
        in_brute = measured_in(runs["brute"], runs["quick"]["chosen"])
        ratios.append(quick_best / brute_best if brute_best else 0.0)
        same_round.append(in_brute / brute_best if brute_best else 0.0)
        print(
            f"  quick's best / brute's best: {ratios[-1]:.2f}; quick's pick as brute measured it / brute's "
            f"best: {same_round[-1]:.2f}"
        )
        if args.confirm_rounds and runs["quick"]["chosen"] and runs["brute"]["chosen"]:
            ratio, cpu_ratio = confirm(args, runs, work)
            again.append(ratio)
            print(
                f"  the two picks measured again, {args.confirm_rounds} alternating rounds: quick's / brute's "
                f"median throughput {ratio:.2f}, CPU per inference {cpu_ratio:.2f}"
            )
    if args.rounds > 1:
        print(f"ratios over the rounds: {', '.join(f'{r:.2f}' for r in ratios)}")
        print(f"same-run ratios over the rounds: {', '.join(f'{r:.2f}' for r in same_round)}")
        if again:
            print(f"picks measured again, ratios over the rounds: {', '.join(f'{r:.2f}' for r in again)}")


def model_analyzer(args: argparse.Namespace, work: Path) -> tuple[float, str, float, Path, int]:
    """Model Analyzer's brute search on Nereid: its best throughput within the budget, config, wall time,
    the folder of its best config and the concurrency of that measurement."""
    folder = work / f"ma-{time.monotonic_ns()}"
    shutil.copytree(args.model_repository / args.model, folder / "repo" / args.model)
    (folder / "export").mkdir()
    # Model Analyzer's own measurement rule (count windows of 50 requests, within 10%), or the looser one
    # docs/model_analyzer.md gives for a busy host
    (folder / "config.yaml").write_text(
        "perf_analyzer_flags:\n  measurement-mode: time_windows\n  measurement-interval: 2000\n"
        "  stability-percentage: 50\n"
        if args.ma_time_windows
        else "{}\n"
    )
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        args.model_analyzer,
        "profile",
        "-f",
        str(folder / "config.yaml"),
        "--model-repository",
        str(folder / "repo"),
        "--profile-models",
        args.model,
        "--triton-launch-mode=local",
        f"--triton-server-path={Path(sys.executable).parent / 'nereid'}",
        "--triton-http-endpoint",
        f"localhost:{http}",
        "--triton-grpc-endpoint",
        f"localhost:{grpc}",
        "--triton-metrics-url",
        f"http://localhost:{metrics}/metrics",
        f"--perf-analyzer-path={args.perf_analyzer}",
        "--collect-cpu-metrics",
        "--latency-budget",
        str(int(args.latency_budget_ms)),
        "--output-model-repository-path",
        str(folder / "out"),
        "--override-output-model-repository",
        "--checkpoint-directory",
        str(folder / "ckpt"),
        "--export-path",
        str(folder / "export"),
        *MA_FLAGS,
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"model-analyzer failed ({done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    if "no valid requests recorded" in done.stdout + done.stderr:
        print("  Model Analyzer recorded no valid requests for some measurement (see docs/model_analyzer.md)")
    with open(folder / "export" / "results" / "metrics-model-inference.csv") as results:
        rows = [r for r in csv.DictReader(results) if float(r["p99 Latency (ms)"]) <= args.latency_budget_ms]
    top = max(rows, key=lambda r: float(r["Throughput (infer/sec)"]))
    config = f"{top['Model Config Path']} at concurrency {top['Concurrency']}"
    pick = folder / "out" / top["Model Config Path"]
    return float(top["Throughput (infer/sec)"]), config, wall, pick, int(top["Concurrency"])


def against_model_analyzer(args: argparse.Namespace, work: Path) -> None:
    print(f"against Model Analyzer: {args.model}, p99 within {args.latency_budget_ms} ms")
    throughput, config, wall, ma_pick, ma_concurrency = model_analyzer(args, work)
    print(f"  Model Analyzer (brute)   {throughput:9,.0f} infer/s  {wall:6.0f} s  {config}")
    for name, space in (
        ("its space", [*MA_SPACE, "--execution-modes", "process"]),
        ("+ modes", [*MA_SPACE, "--execution-modes", "process,thread"]),
    ):
        document = analyze(args, "quick", space, work)
        quick_best, settings = best(document)
        print(
            f"  quick, {name:10} {quick_best:9,.0f} infer/s  {document['wall_s']:6.0f} s  {settings}  "
            f"({quick_best / throughput:.2f}x the throughput in {document['wall_s'] / wall:.2f} of the time; "
            f"{document['measured']} of {document['space_size']} candidates)"
        )
        if args.confirm_rounds and document["chosen"]:
            chosen = next(r for r in document["candidates"] if r["key"] == document["chosen"])
            quick_pick = Path(document["out"]) / args.model
            picks = {
                "Model Analyzer": (ma_pick, ma_concurrency),
                "quick": (quick_pick, chosen["best"]["concurrency"]),
            }
            figures = side_by_side(args, picks, work)
            for who, values in figures.items():
                print(f"    {who}'s pick again: {', '.join(f'{v:,.0f}' for v in values)} infer/s")
            ratio = statistics.median(figures["quick"]) / statistics.median(figures["Model Analyzer"])
            print(
                f"    the two picks measured again, alternating: quick's / Model Analyzer's median {ratio:.2f}"
            )


# The picks measured again: 2 s windows within 50%, as docs/model_analyzer.md configures Model Analyzer.
_AGAIN = WindowRules(window_s=2.0, count=3, tolerance=0.5, max_windows=10)


def side_by_side(
    args: argparse.Namespace, picks: dict[str, tuple[Path, int]], work: Path
) -> dict[str, list[float]]:
    """Each pick (a model folder, at its concurrency) served by one Nereid under a name of its own, and
    measured by perf_analyzer over gRPC in alternating rounds: infer/s of each round."""
    repository = work / f"side-by-side-{time.monotonic_ns()}"
    names = {}
    for i, (who, (folder, _)) in enumerate(picks.items()):
        name = names[who] = f"{args.model}_pick{i}"
        shutil.copytree(folder, repository / name, symlinks=False)
        config = repository / name / "config.pbtxt"
        config.write_text(re.sub(r"(?m)^name:.*$", f'name: "{name}"', config.read_text(), count=1))
    http, grpc = free_port(), free_port()
    server = start_nereid(http, repository, grpc)
    figures: dict[str, list[float]] = {who: [] for who in picks}
    try:
        wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", server)
        for round_ in range(args.confirm_rounds):
            order = list(picks) if round_ % 2 == 0 else list(reversed(picks))
            for who in order:
                out = repository / "pa.csv"
                out.unlink(missing_ok=True)
                url = f"127.0.0.1:{grpc}"
                command = perf_analyzer_command(
                    args.perf_analyzer, url, "grpc", names[who], picks[who][1], _AGAIN, "zero"
                )
                subprocess.run([*command, "-f", str(out)], capture_output=True, check=True)
                figures[who].append(parse_perf_analyzer_csv(out.read_text())["Inferences/Second"])
    finally:
        stop(server)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-repository", type=Path, default=ADD_SUB_REPOSITORY)
    parser.add_argument("--model", default="add_sub")
    parser.add_argument("--latency-budget-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1, help="quick and brute runs, alternating")
    parser.add_argument(
        "--confirm-rounds", type=int, default=3, help="rounds measuring the two picks again (0: none)"
    )
    parser.add_argument("--perf-analyzer", default=None, help="perf_analyzer's path (else the built-in one)")
    parser.add_argument("--model-analyzer", default=None, help="model-analyzer's path: compare with it too")
    parser.add_argument(
        "--ma-time-windows",
        action="store_true",
        help="Model Analyzer measures in 2 s time windows within 50%% (its defaults fail on a busy host)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="a folder to keep every report in")
    parser.add_argument("--skip-brute", action="store_true", help="only the comparison with Model Analyzer")
    args = parser.parse_args()
    if args.model_analyzer and not args.perf_analyzer:
        parser.error("--model-analyzer needs --perf-analyzer")
    with tempfile.TemporaryDirectory(prefix="nereid-analyze-bench-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        if not args.skip_brute:
            quick_against_brute(args, work)
        if args.model_analyzer:
            against_model_analyzer(args, work)


if __name__ == "__main__":
    main()
