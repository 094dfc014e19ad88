"""The whole HTTP infer path in process: perf_analyzer's binary infer request for `add_sub` (Python, thread
mode, `dynamic_batching { }`) pushed through Nereid's HTTP protocol, frontend, engine, batcher and model,
over fake transports, with no sockets and no load generator.

Each round feeds one request to each of `--concurrency` connections in one turn of the event loop (as
the loop would read them from that many sockets), then waits until every one is answered: one batch of
`--concurrency` requests. It prints the CPU time (process_time: the loop and the instance thread) and wall
time per request. The work per request is the same from run to run, so two trees can be compared on a
busy host, and under `valgrind --tool=callgrind` (`--requests` small) as instruction counts:

    python bench/infer_path.py [--concurrency 16] [--requests 20000] [--rounds 5] [--split]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/infer_path.py --requests 4000 --rounds 1

`--no-batching` serves add_sub as it ships, without `dynamic_batching` (the default scheduler: one
execution per request); `--mode process` runs it in a worker process, as Triton does. Under callgrind only
the server process is counted, and a process-mode worker neither polls nor is polled for (busy-wait 0), so
that the count does not depend on how the two processes happen to interleave.

With `--instructions N1,N2` it runs itself twice under callgrind, with N1 and N2 requests, and prints the
instructions per request from the difference (start-up and model loading cancel out).

`--traced` traces every request (rate 1, TIMESTAMPS, a trace file written every 1000 traces).

`--split` sends each request's head and body in two reads, as libcurl (perf_analyzer) writes them.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import path_main, path_parser  # noqa: E402
from http_dispatch import Transport  # noqa: E402

from nereid import heap  # noqa: E402
from nereid.frontends.http import HttpFrontend, HttpServer, error_response  # noqa: E402
from nereid.frontends.http.protocol import _Connection  # noqa: E402
from nereid.server import build_engine  # noqa: E402
from nereid.settings import ServerSettings  # noqa: E402
from nereid.tracing.config import LEVEL_TIMESTAMPS, TraceConfig  # noqa: E402

MODEL = "add_sub"
SOURCE = ROOT / "examples" / "python_model_repository" / MODEL
_HEADER = (
    b'{"id":"","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size"'
    b':64}},{"name":"INPUT1","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}}],'
    b'"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":'
    b'{"binary_data":true}}]}'
)
BODY = _HEADER + bytes(range(128))
# what perf_analyzer's libcurl sends, head then body
HEAD = (
    b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: libcurl-agent/1.0\r\n"
    b"Accept: */*\r\nInference-Header-Content-Length: %d\r\nContent-Type: application/octet-stream\r\n"
    b"Content-Length: %d\r\n\r\n" % (len(_HEADER), len(BODY))
)


class _Counter:
    def __init__(self) -> None:
        self.left = 0
        self.done: asyncio.Future[None] | None = None

    def written(self) -> None:
        self.left -= 1
        if self.left == 0 and self.done is not None:
            self.done.set_result(None)


async def _drive(
    frontend: HttpFrontend, concurrency: int, requests: int, rounds: int, split: bool, tracing: object
) -> list[tuple[float, float]]:
    loop = asyncio.get_running_loop()
    server = HttpServer(
        getattr(frontend, "dispatch", frontend.handle), error_response, 1 << 20, tracing=tracing
    )
    counter = _Counter()
    connections = []
    for _ in range(concurrency):
        connection = _Connection(server)
        transport = Transport(counter.written)
        connection.connection_made(transport)
        connections.append((connection, transport))
    whole = HEAD + BODY

    async def one_batch() -> None:
        counter.left = concurrency
        counter.done = loop.create_future()
        for connection, _ in connections:
            if split:
                connection.data_received(HEAD)
                connection.data_received(BODY)
            else:
                connection.data_received(whole)
        await counter.done

    for _ in range(20):  # warm-up: the model's first executions, the pool's attach
        await one_batch()
    answer = connections[0][1].last
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer: {answer[:300]!r}")
    per_request = []
    batches = max(1, requests // concurrency)
    for _ in range(rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(batches):
            await one_batch()
        n = batches * concurrency
        per_request.append(((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6))
    return per_request


def _run(args: argparse.Namespace) -> list[tuple[float, float]]:
    import uvloop

    with tempfile.TemporaryDirectory(prefix="nereid-bench-path-") as tmp:
        repository = Path(tmp)
        shutil.copytree(SOURCE, repository / MODEL)
        if not args.no_batching:
            config = repository / MODEL / "config.pbtxt"
            config.write_text(config.read_text() + "dynamic_batching { }\n")
        python = {"execution-mode": args.mode}
        if args.busy_wait_us is not None:
            python["busy-wait-microseconds"] = str(args.busy_wait_us)
        trace = TraceConfig()
        if args.traced:  # every request, written every 1000 traces as bench/dynamic_batching.py --traced
            trace = TraceConfig(
                level=LEVEL_TIMESTAMPS, rate=1, log_frequency=1000, file=str(repository / "trace.json")
            )
        settings = ServerSettings(
            model_repositories=(repository,), backend_config={"python": python}, trace=trace
        )
        engine = build_engine(settings)
        heap.settle()  # as the nereid command does once its models are loaded
        try:
            frontend = HttpFrontend(engine, settings)
            tracing = engine.tracer if args.traced else None
            return uvloop.run(
                _drive(frontend, args.concurrency, args.requests, args.rounds, args.split, tracing)
            )
        finally:
            engine.shutdown()


def _options(args: argparse.Namespace) -> list[str]:
    """The options beyond the shared ones, for the runs under callgrind."""
    return [
        "--busy-wait-us=0" if args.busy_wait_us is None else f"--busy-wait-us={args.busy_wait_us}",
        *(["--split"] if args.split else []),
        *(["--no-batching"] if args.no_batching else []),
        *(["--traced"] if args.traced else []),
    ]


def main() -> None:
    parser = path_parser(__doc__)
    parser.add_argument("--split", action="store_true", help="head and body in two reads")
    parser.add_argument(
        "--no-batching", action="store_true", help="no dynamic_batching: the default scheduler"
    )
    parser.add_argument(
        "--traced", action="store_true", help="trace every request (rate 1, TIMESTAMPS, a trace file)"
    )
    parser.add_argument(
        "--busy-wait-us", type=int, help="process mode's busy-wait-microseconds (0 under --instructions)"
    )
    path_main(parser, _run, _options, __file__)


if __name__ == "__main__":
    main()
