"""The OpenAI API's cost against the v2 API's, on the same models and the same server.

Streamed chat: `tiny_chat` (examples/openai, a decoupled Python model sending a word a response) asked
for the same words three ways: POST /v1/chat/completions with stream=true, gRPC ModelStreamInfer, and
HTTP POST /v2/models/tiny_chat/generate_stream. Tokens per second (the responses that carry text) and the
time to the first token, at each concurrency (one connection or stream per client). Embeddings:
`tiny_embed` (ONNX Runtime) through POST /v1/embeddings against v2 infer with the same text, in requests
per second.

Rounds alternate the paths, so that the shared host's noise falls on each alike; the figures are
medians over rounds, with the ratio to gRPC (to v2 infer for embeddings) per round and its range. Server
CPU microseconds per token (per request for embeddings): the server's processes, its Python workers
included, from /proc over each measurement, and this client process's. The clients are lean on every path: raw HTTP/1.1 on asyncio
for both HTTP paths, grpc.aio with prebuilt messages for gRPC, all in this process.

    python bench/openai.py [--rounds 5] [--seconds 3] [--tokens 32] [--concurrency 1 16]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import orjson
from tritonclient.grpc import service_pb2, service_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, free_port, start_nereid, stop, wait_ready  # noqa: E402
from cpu import tree_cpu_seconds  # noqa: E402

EXAMPLE = ROOT / "examples" / "openai"
WORDS = "the fast model answers every request with these words"
PROMPT = f"[user] {WORDS}\n[assistant]"  # what tiny_chat's template makes of the chat below


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: a request written whole, its answer read as it comes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> HttpConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, path: str, body: bytes) -> None:
        head = f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)

    async def head(self) -> dict[bytes, bytes]:
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"answered {lines[0]!r}")
        return {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:] if line)
        }

    async def events(self) -> list[bytes] | None:
        """The events of the next chunk (None at the end of the body)."""
        size = int((await self.reader.readuntil(b"\r\n"))[:-2], 16)
        data = await self.reader.readexactly(size + 2)
        if size == 0:
            return None
        return [event[6:] for event in data[:-2].split(b"\n\n") if event.startswith(b"data: ")]

    async def body(self) -> bytes:
        headers = await self.head()
        return await self.reader.readexactly(int(headers[b"content-length"]))

    def close(self) -> None:
        self.writer.close()


# Whether an event carries a token, told from its bytes: the client's cost per event kept small and alike
# on both HTTP paths (a JSON parse per event made this process, not the server, the bottleneck at 16).
def openai_token(event: bytes) -> bool:
    return b'"delta":{"content":"' in event and b'"delta":{"content":""' not in event


def generate_token(event: bytes) -> bool:
    return b'"text_output":"' in event and b'"text_output":""' not in event


async def http_stream(
    connection: HttpConnection, path: str, body: bytes, is_token: Callable[[bytes], bool]
) -> tuple[float, int]:
    """One streamed request: seconds to its first token, and its tokens."""
    start = time.perf_counter()
    connection.send(path, body)
    await connection.head()
    first, tokens = 0.0, 0
    while (events := await connection.events()) is not None:
        for event in events:
            if is_token(event):
                tokens += 1
                if tokens == 1:
                    first = time.perf_counter() - start
    return first, tokens


class GrpcStream:
    """One ModelStreamInfer stream on which requests go one after the other."""

    def __init__(
        self, stub: service_pb2_grpc.GRPCInferenceServiceStub, request: service_pb2.ModelInferRequest
    ) -> None:
        self._requests: asyncio.Queue[service_pb2.ModelInferRequest | None] = asyncio.Queue()
        self._call = stub.ModelStreamInfer(self._outgoing())
        self._request = request

    async def _outgoing(self):  # type: ignore[no-untyped-def]
        while (request := await self._requests.get()) is not None:
            yield request

    async def run(self) -> tuple[float, int]:
        start = time.perf_counter()
        self._requests.put_nowait(self._request)
        first, tokens = 0.0, 0
        while True:
            answer = await self._call.read()
            if answer.error_message:
                raise RuntimeError(answer.error_message)
            response = answer.infer_response
            if response.raw_output_contents and len(response.raw_output_contents[0]) > 4:  # text, not ""
                tokens += 1
                if tokens == 1:
                    first = time.perf_counter() - start
            if response.parameters["triton_final_response"].bool_param:
                return first, tokens

    def close(self) -> None:
        self._requests.put_nowait(None)
        self._call.cancel()


def grpc_request(tokens: int) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="tiny_chat")
    tensor = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    del tensor
    encoded = PROMPT.encode()
    request.raw_input_contents.append(struct.pack("<I", len(encoded)) + encoded)
    request.parameters["max_tokens"].int64_param = tokens
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


Measure = Callable[[], Awaitable[tuple[float, int]]]


async def load(
    make_clients: Callable[[int], Awaitable[list[tuple[Measure, Callable[[], None]]]]],
    concurrency: int,
    seconds: float,
) -> tuple[int, list[float], list[float]]:
    """Clients sending one request after another for `seconds`: tokens (or requests), and each request's
    time to its first token and to its end."""
    clients = await make_clients(concurrency)
    deadline = time.perf_counter() + seconds
    firsts: list[float] = []
    totals: list[float] = []
    counts = [0, 0]

    async def client(measure: Measure) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            first, tokens = await measure()
            firsts.append(first)
            totals.append(time.perf_counter() - started)
            counts[0] += tokens
            counts[1] += 1

    try:
        await asyncio.gather(*(client(measure) for measure, _ in clients))
    finally:
        for _, close in clients:
            close()
    return counts[0], firsts, totals


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="per path, per concurrency, per round")
    parser.add_argument("--tokens", type=int, default=32, help="max_tokens of each streamed request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    return parser.parse_args()


def build_repository(target: Path) -> Path:
    shutil.copytree(EXAMPLE / "model_repository", target, ignore=shutil.ignore_patterns("model.onnx"))
    output = target / "tiny_embed" / "1" / "model.onnx"
    subprocess.run(
        [sys.executable, str(EXAMPLE / "build_embedder.py"), "--output", str(output)],
        check=True,
        capture_output=True,
    )
    return target


async def main(args: argparse.Namespace) -> None:
    http_port, grpc_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="nereid-bench-openai-"))
    server = start_nereid(http_port, build_repository(workdir / "models"), grpc_port)
    try:
        wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        chat = orjson.dumps(
            {
                "model": "tiny_chat",
                "messages": [{"role": "user", "content": WORDS}],
                "stream": True,
                "max_tokens": args.tokens,
            }
        )
        generate = orjson.dumps({"text_input": PROMPT, "max_tokens": args.tokens})
        embedding = orjson.dumps({"model": "tiny_embed", "input": WORDS})
        infer = orjson.dumps(
            {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [WORDS]}]}
        )
        request = grpc_request(args.tokens)

        def http_clients(path: str, body: bytes, is_token: Callable[[bytes], bool] | None):  # type: ignore[no-untyped-def]
            async def make(count: int) -> list[tuple[Measure, Callable[[], None]]]:
                made = []
                for _ in range(count):
                    connection = await HttpConnection.open(http_port)
                    if is_token is None:

                        async def measure(c: HttpConnection = connection) -> tuple[float, int]:
                            c.send(path, body)
                            await c.body()
                            return 0.0, 1
                    else:

                        async def measure(c: HttpConnection = connection) -> tuple[float, int]:
                            return await http_stream(c, path, body, is_token)

                    made.append((measure, connection.close))
                return made

            return make

        async def grpc_clients(count: int) -> list[tuple[Measure, Callable[[], None]]]:
            streams = [GrpcStream(stub, request) for _ in range(count)]
            return [(stream.run, stream.close) for stream in streams]

        streaming = {
            "openai": http_clients("/v1/chat/completions", chat, openai_token),
            "grpc": grpc_clients,
            "generate_stream": http_clients("/v2/models/tiny_chat/generate_stream", generate, generate_token),
        }
        embeddings = {
            "openai": http_clients("/v1/embeddings", embedding, None),
            "v2_infer": http_clients("/v2/models/tiny_embed/infer", infer, None),
        }
        for paths, unit, reference in ((streaming, "tokens", "grpc"), (embeddings, "requests", "v2_infer")):
            for concurrency in args.concurrency:
                for name in paths:  # warm up: connections, caches, the model's first requests
                    await load(paths[name], concurrency, 0.5)
                rates: dict[str, list[float]] = {name: [] for name in paths}
                ttfts: dict[str, list[float]] = {name: [] for name in paths}
                cpus: dict[str, list[float]] = {name: [] for name in paths}
                clients: dict[str, list[float]] = {name: [] for name in paths}
                lasts: dict[str, list[float]] = {name: [] for name in paths}
                for round_index in range(args.rounds):
                    names = list(paths) if round_index % 2 == 0 else list(reversed(paths))
                    for name in names:
                        cpu_before, client_before = tree_cpu_seconds(server.pid), time.process_time()
                        started = time.perf_counter()
                        count, firsts, totals = await load(paths[name], concurrency, args.seconds)
                        elapsed = time.perf_counter() - started
                        cpus[name].append((tree_cpu_seconds(server.pid) - cpu_before) * 1e6 / max(count, 1))
                        clients[name].append((time.process_time() - client_before) * 1e6 / max(count, 1))
                        rates[name].append(count / elapsed)
                        if firsts and unit == "tokens":
                            ttfts[name].append(statistics.median(firsts) * 1e3)
                        lasts[name].append(statistics.median(totals) * 1e3)
                print(
                    f"\n{unit} per second at concurrency {concurrency} ({args.rounds} alternating rounds of {args.seconds:g} s):"
                )
                for name in paths:
                    ratios = [rate / ref for rate, ref in zip(rates[name], rates[reference], strict=True)]
                    line = (
                        f"  {name:16s} {statistics.median(rates[name]):9.0f} {unit}/s"
                        f"  x{statistics.median(ratios):.3f} of {reference} (rounds {min(ratios):.3f}-{max(ratios):.3f})"
                        f"  CPU us/{unit[:-1]}: server {statistics.median(cpus[name]):4.0f}"
                        f" client {statistics.median(clients[name]):4.0f}"
                    )
                    if ttfts[name]:
                        diffs = [t - r for t, r in zip(ttfts[name], ttfts[reference], strict=True)]
                        line += (
                            f"  first token {statistics.median(ttfts[name]):6.2f} ms"
                            f" ({statistics.median(diffs):+.2f} ms vs {reference}, rounds {min(diffs):+.2f}..{max(diffs):+.2f})"
                        )
                    line += f"  whole request {statistics.median(lasts[name]):6.2f} ms"
                    print(line, flush=True)
        await channel.close()
    finally:
        stop(server)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
