"""Sequence batching, Nereid against the real Triton: 64 concurrent sequences on one Python accumulator.

Both servers load `accumulator` from examples/sequence_model_repository (a model.py that sums each
sequence's inputs; direct strategy, max_batch_size 8, two CPU instances, so 16 slots and a backlog).
perf_analyzer drives it at concurrency 64, which for a sequence model means 64 sequences in flight,
each of --sequence-length requests with START on the first and END on the last. The servers alternate
for --rounds rounds; the script prints infer/s per round, then the medians and nereid/triton.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, free_port, start_nereid, stop, wait_ready
from perf_analyzer import install_perf_analyzer, measure_model, start_triton

MODEL = "accumulator"
SOURCE = ROOT / "examples" / "sequence_model_repository" / MODEL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=64, help="sequences in flight")
    parser.add_argument("--sequence-length", type=int, default=20, help="requests per sequence")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--interval-ms", type=int, default=4000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried")
    parser.add_argument("--stability", type=int, default=100, help="stability percent (high: noisy cores)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both servers, alternating")
    parser.add_argument("--nereid-only", action="store_true", help="skip the real Triton")
    args = parser.parse_args()
    binary, lib = install_perf_analyzer()
    servers = {"nereid": start_nereid, "triton": start_triton}
    if args.nereid_only:
        del servers["triton"]
    extra = ("--sequence-length", str(args.sequence_length), "--input-data", "random")
    results: dict[str, list[float]] = {server: [] for server in servers}
    with tempfile.TemporaryDirectory(prefix="nereid-bench-sequence-") as tmp:
        repository = Path(tmp) / "repository"
        shutil.copytree(SOURCE, repository / MODEL)
        for round_ in range(args.rounds):
            for server, starter in servers.items():
                process = None
                try:
                    port, grpc_port = free_port(), free_port()
                    process = starter(port, repository, grpc_port)
                    wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
                    target = ["-u", f"127.0.0.1:{port}"]
                    if args.protocol == "grpc":
                        target = ["-i", "grpc", "-u", f"127.0.0.1:{grpc_port}"]
                    c = args.concurrency
                    (row,) = measure_model(binary, lib, MODEL, target, f"{c}:{c}:1", args, extra)
                    results[server].append(float(row["Inferences/Second"]))
                except (RuntimeError, subprocess.CalledProcessError) as exc:
                    print(f"FAILED on {server}: {exc}", file=sys.stderr)
                    return 1
                finally:
                    stop(process)
            line = "  ".join(f"{server}={values[-1]:.0f} infer/s" for server, values in results.items())
            print(f"round {round_ + 1}: {line}", flush=True)
    medians = {server: sorted(values)[len(values) // 2] for server, values in results.items()}
    print(
        f"{MODEL}: {args.concurrency} concurrent sequences of {args.sequence_length} requests over "
        f"{args.protocol}, median infer/s: " + ", ".join(f"{s} {v:.0f}" for s, v in medians.items())
    )
    if "triton" in medians:
        ratio = medians["nereid"] / medians["triton"]
        print(f"nereid/triton = {ratio:.2f} (target >= 1.0: {'met' if ratio >= 1.0 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
