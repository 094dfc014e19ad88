"""The gRPC unary infer path in process: perf_analyzer's ModelInferRequest for `add_sub` (Python, thread
mode, `dynamic_batching { }`) handed to Nereid's pygrpc-native server as its Rust front hands calls over,
then through the servicer, engine, batcher and model, to a stand-in front that takes the answers: no
sockets, no HTTP/2 and no load generator.

The server starts as Nereid starts it (`--grpc-request-compression=gzip`, so the native core serves),
on a real port that nothing uses; then its front is swapped for the stand-in. Each round hands one call
per `--concurrency` client to the event loop in one batch of events (as the front's dispatch thread
does), then waits until every one is answered. It prints the CPU time (process_time: the loop and the
instance thread) and wall time per request. The work per request is the same from run to run, so two
trees can be compared on a busy host, and under callgrind as instruction counts:

    python bench/grpc_infer_path.py [--concurrency 16] [--requests 20000] [--rounds 5]
    python bench/grpc_infer_path.py --instructions 2000,6000

With `--instructions N1,N2` it runs itself twice under callgrind, with N1 and N2 requests, and prints the
instructions per request from the difference (start-up and model loading cancel out). `--metadata`
adds the headers perf_analyzer's client sends as call metadata; `--trace-rate N` traces every Nth request
(`--trace-config rate=N,level=TIMESTAMPS`, written to a file in the run's folder). `--timeout-us N` sets
the request's `timeout` parameter: a request control, which the servicer's layout cache does not keep, so
that every request is decoded in full by the codec (`decode_infer_request`), as a sequence's would be.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import path_main, path_parser  # noqa: E402
from pygrpc_native import EVENT_CALL  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402

from nereid import heap  # noqa: E402
from nereid.frontends.grpc import start_grpc_server  # noqa: E402
from nereid.server import build_engine  # noqa: E402
from nereid.settings import GrpcOptions, ServerSettings  # noqa: E402
from nereid.tracing.config import LEVEL_TIMESTAMPS, TraceConfig  # noqa: E402

MODEL = "add_sub"
SOURCE = ROOT / "examples" / "python_model_repository" / MODEL
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
# what the C++ client of perf_analyzer sends beside the pseudo-headers (the front keeps custom ones)
PERF_ANALYZER_METADATA = (("user-agent", "grpc-c++/1.62.1 grpc-c/39.0.0 (linux; chttp2)"),)


def infer_payload(timeout_us: int = 0) -> bytes:
    """perf_analyzer's request for add_sub: two FP32 [1,16] inputs in raw contents, both outputs asked,
    and the parameter perf_analyzer sets on every call (and `timeout`, when not 0)."""
    request = pb.ModelInferRequest(model_name=MODEL)
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    if timeout_us:
        request.parameters["timeout"].int64_param = timeout_us
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    return request.SerializeToString()


class StandInFront:
    """Takes the server's answers in place of the Rust front, counting them down."""

    def __init__(self) -> None:
        self.left = 0
        self.done: asyncio.Future[None] | None = None
        self.last: tuple[str, Any] = ("", None)

    def _answered(self) -> None:
        self.left -= 1
        if self.left == 0 and self.done is not None:
            self.done.set_result(None)

    def respond(
        self, call_id: int, payload: bytes, initial_metadata: Any = None, trailing_metadata: Any = None
    ) -> bool:
        self.last = ("respond", payload)
        self._answered()
        return True

    def fail(self, call_id: int, code: int, message: str, trailing_metadata: Any = None) -> bool:
        self.last = ("fail", (code, message))
        self._answered()
        return True


async def _drive(
    settings: ServerSettings, engine: Any, args: argparse.Namespace
) -> list[tuple[float, float]]:
    loop = asyncio.get_running_loop()
    server, _ = await start_grpc_server(engine, settings)
    real_front = server._front
    front = StandInFront()
    server._front = front
    try:
        method_id = next(i for i, (path, _) in enumerate(server._table) if path == INFER_METHOD)
        payload = infer_payload(args.timeout_us)
        metadata = PERF_ANALYZER_METADATA if args.metadata else ()
        details = (metadata, "ipv4:127.0.0.1:40000", None)
        call_ids = iter(range(1, 1 << 62))
        concurrency = args.concurrency

        async def one_batch() -> None:
            front.left = concurrency
            front.done = loop.create_future()
            events = [
                (EVENT_CALL, next(call_ids), method_id, payload, None, details) for _ in range(concurrency)
            ]
            server._on_events(events)
            await front.done

        for _ in range(20):  # warm-up: the model's first executions
            await one_batch()
        kind, answer = front.last
        if kind != "respond":
            raise RuntimeError(f"unexpected answer: {answer}")
        response = pb.ModelInferResponse.FromString(answer)
        if [o.name for o in response.outputs] != ["OUTPUT0", "OUTPUT1"]:
            raise RuntimeError(f"unexpected response: {response}")
        per_request = []
        batches = max(1, args.requests // concurrency)
        for _ in range(args.rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(batches):
                await one_batch()
            n = batches * concurrency
            per_request.append(
                ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
            )
        return per_request
    finally:
        server._front = real_front
        await server.stop(None)


def _run(args: argparse.Namespace) -> list[tuple[float, float]]:
    import uvloop

    with tempfile.TemporaryDirectory(prefix="nereid-bench-grpc-path-") as tmp:
        repository = Path(tmp) / "models"
        shutil.copytree(SOURCE, repository / MODEL)
        config = repository / MODEL / "config.pbtxt"
        config.write_text(config.read_text() + "dynamic_batching { }\n")
        trace = TraceConfig()
        if args.trace_rate:
            trace = TraceConfig(
                level=LEVEL_TIMESTAMPS, rate=args.trace_rate, file=str(Path(tmp) / "trace.json")
            )
        settings = ServerSettings(
            model_repositories=(repository,),
            backend_config={"python": {"execution-mode": args.mode}},
            grpc_address="127.0.0.1",
            grpc_port=0,
            grpc=GrpcOptions(core="native", request_compression=frozenset({"gzip"})),
            trace=trace,
        )
        engine = build_engine(settings)
        heap.settle()  # as the nereid command does once its models are loaded
        try:
            return uvloop.run(_drive(settings, engine, args))
        finally:
            engine.shutdown()


def _options(args: argparse.Namespace) -> list[str]:
    """The options beyond the shared ones, for the runs under callgrind."""
    return [
        *(["--metadata"] if args.metadata else []),
        *([f"--trace-rate={args.trace_rate}"] if args.trace_rate else []),
        *([f"--timeout-us={args.timeout_us}"] if args.timeout_us else []),
    ]


def main() -> None:
    parser = path_parser(__doc__)
    parser.add_argument("--metadata", action="store_true", help="perf_analyzer's call metadata")
    parser.add_argument("--trace-rate", type=int, default=0, help="trace every Nth request (0: no tracing)")
    parser.add_argument("--timeout-us", type=int, default=0, help="the requests' timeout parameter (0: none)")
    path_main(parser, _run, _options, __file__)


if __name__ == "__main__":
    main()
