"""Tracing's own CPU per traced request, in process: what the frontend, the admission path and the
instance pool do to a sampled request's trace (rate 1, TIMESTAMPS: sample, the twelve timestamps of an
HTTP request through a model, close), and the trace file written every 1000 traces, formatting included.

The figure is the best of many short runs of CPU time (thread time), which holds on a busy host where
throughput does not: compare trees by running this from each (`PYTHONPATH=<tree> python
bench/tracing_cost.py`), alternately.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nereid.tracing import TraceManager
from nereid.tracing.config import LEVEL_TIMESTAMPS, TraceConfig

BATCH = 1000  # traces per file, as bench/dynamic_batching.py --traced writes them


def traced_requests(manager: TraceManager, count: int) -> float:
    """Microseconds of CPU per request for `count` traced requests."""
    started = time.thread_time_ns()
    for _ in range(count):
        received = ("HTTP_RECV_START", time.perf_counter_ns(), "HTTP_RECV_END", time.perf_counter_ns())
        trace = manager.sample("add_sub", None, received)
        assert trace is not None
        trace.admitted("add_sub", 1, "", time.perf_counter_ns(), time.perf_counter_ns(), ())
        ran = time.perf_counter_ns()
        trace.executed = (ran, time.perf_counter_ns(), time.perf_counter_ns())  # as the instance pool
        trace.request_end((), time.perf_counter_ns())
        trace.complete = time.perf_counter_ns()  # as the frontends take INFER_RESPONSE_COMPLETE
        trace.sent("HTTP_SEND_START", time.perf_counter_ns(), "HTTP_SEND_END")
    return (time.thread_time_ns() - started) / count / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30, help="runs of 1000 requests; the best is kept")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nereid-bench-tracing-") as tmp:
        config = TraceConfig(
            level=LEVEL_TIMESTAMPS, rate=1, log_frequency=BATCH, file=str(Path(tmp) / "trace.json")
        )
        manager = TraceManager(config)
        traced_requests(manager, BATCH)  # warm up: templates, the first file
        best = min(traced_requests(manager, BATCH) for _ in range(args.runs))
        manager.close()
        written = len(list(Path(tmp).glob("trace.json.*")))
    print(
        f"tracing: {best:.2f} us CPU per traced request (best of {args.runs} runs, {written} files written)"
    )


if __name__ == "__main__":
    main()
