"""Tracing's own CPU per traced request, in process: what the frontend, the admission path and the
instance pool do to a sampled request's trace (rate 1, TIMESTAMPS: sample, the twelve timestamps of an
HTTP request through a model, close), and the trace file written every 1000 traces, formatting included.

The figure is the best of many short runs of CPU time (thread time), which holds on a busy host where
throughput does not: compare trees by running this from each (`PYTHONPATH=<tree> python
bench/tracing_cost.py`), alternately.

`--breakdown` also measures the trace's life cut after each of its steps and prints what each step adds:
`sample` (the frontend's receive times and the sample), `record` (what the admission path and the instance
pool record), `send` (the send times, and the trace closed), `keep` (its setting keeping its values) and
`write` (its share of formatting and writing a batch of 1000).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from unittest import mock

from nereid.tracing import TraceManager
from nereid.tracing.config import LEVEL_TIMESTAMPS, TraceConfig
from nereid.tracing.settings import TraceSetting

BATCH = 1000  # traces per file, as bench/dynamic_batching.py --traced writes them


# How far `traced_requests` takes each request, for --breakdown: each stage adds one step of a trace's life.
STAGES = ("sample", "record", "send", "keep", "write")


def traced_requests(manager: TraceManager, count: int, until: str = "write") -> float:
    """Microseconds of CPU per request for `count` traced requests, each taken as far as `until`: its
    sample, the timestamps the admission path and the instance pool record, its send times, the setting
    keeping its values, and the batch written (the last two are cut by `stage` from outside)."""
    record = until != "sample"
    send = until not in ("sample", "record")
    started = time.thread_time_ns()
    for _ in range(count):
        received = ("HTTP_RECV_START", time.perf_counter_ns(), "HTTP_RECV_END", time.perf_counter_ns())
        trace = manager.sample("add_sub", None, received)
        assert trace is not None
        if record:
            trace.admitted("add_sub", 1, "", time.perf_counter_ns(), time.perf_counter_ns(), ())
            ran = time.perf_counter_ns()
            trace.executed = (ran, time.perf_counter_ns(), time.perf_counter_ns())  # as the instance pool
            trace.request_end((), time.perf_counter_ns())
            trace.complete = time.perf_counter_ns()  # as the frontends take INFER_RESPONSE_COMPLETE
        if send:
            trace.sent("HTTP_SEND_START", time.perf_counter_ns(), "HTTP_SEND_END")
    return (time.thread_time_ns() - started) / count / 1000


def stage(until: str) -> contextlib.AbstractContextManager[object]:
    """A trace's life cut after its send times (`send`: the setting keeps nothing) or once kept (`keep`:
    no batch is formatted nor written)."""
    if until == "send":
        return mock.patch.multiple(  # plain traces wait in a list (emptied here), the others keep a group
            TraceSetting, keep_plain=lambda self: self.plain.clear(), write_group=lambda self, traces: None
        )
    if until == "keep":
        return mock.patch.object(TraceSetting, "_save", lambda self, batch, indexed: None)
    return contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30, help="runs of 1000 requests; the best is kept")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also the CPU of each step of a trace's life: sample, record, send, keep, write",
    )
    args = parser.parse_args()
    best: dict[str, float] = {}
    for until in STAGES if args.breakdown else STAGES[-1:]:
        with tempfile.TemporaryDirectory(prefix="nereid-bench-tracing-") as tmp, stage(until):
            config = TraceConfig(
                level=LEVEL_TIMESTAMPS, rate=1, log_frequency=BATCH, file=str(Path(tmp) / "trace.json")
            )
            manager = TraceManager(config)
            traced_requests(manager, BATCH, until)  # warm up: templates, the first file
            best[until] = min(traced_requests(manager, BATCH, until) for _ in range(args.runs))
            manager.close()
            written = len(list(Path(tmp).glob("trace.json.*")))
    print(
        f"tracing: {best['write']:.2f} us CPU per traced request (best of {args.runs} runs, {written} files"
        " written)"
    )
    if args.breakdown:
        before = 0.0
        for until in STAGES:
            print(f"  {until:<7} {best[until] - before:+6.2f} us")
            before = best[until]


if __name__ == "__main__":
    main()
