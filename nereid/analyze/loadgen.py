"""The built-in load generator: a closed loop of `concurrency` requests in flight, over HTTP or gRPC.

Used where perf_analyzer is not installed. One event loop sends pre-encoded requests (HTTP: raw
HTTP/1.1 with Triton's binary tensor extension on keep-alive connections; gRPC: one prepared
`ModelInferRequest` on one channel), so the client costs little of the host it shares with the server.
Each completion is recorded with its time, and the caller cuts the record into windows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from nereid.analyze.inputs import InputTensor


class LoadError(RuntimeError):
    """The server refused the analyzer's requests; the message is its answer."""


@dataclass
class Record:
    """Completions as (end time, latency seconds), and the first error answered."""

    done: list[tuple[float, float]] = field(default_factory=list)
    error: str | None = None


def http_request(host: str, model: str, inputs: Sequence[InputTensor]) -> bytes:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "datatype": t.datatype,
                    "parameters": {"binary_data_size": len(t.data)},
                }
                for t in inputs
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    body = header + b"".join(t.data for t in inputs)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _http_worker(url: str, request: bytes, record: Record, stop: asyncio.Event) -> None:
    host, port = url.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        while not stop.is_set():
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            end = time.perf_counter()
            if not head.startswith(b"HTTP/1.1 200"):
                record.error = record.error or body.decode(errors="replace")
                stop.set()
                return
            record.done.append((end, end - start))
    finally:
        writer.close()


def _grpc_workers(
    url: str, model: str, inputs: Sequence[InputTensor]
) -> tuple[Any, Callable[..., Awaitable[None]]]:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=model)
    for t in inputs:
        request.inputs.add(name=t.name, datatype=t.datatype, shape=list(t.shape))
        request.raw_input_contents.append(t.data)
    channel = grpc.aio.insecure_channel(url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

    async def worker(record: Record, stop: asyncio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                await stub.ModelInfer(request)
            except grpc.aio.AioRpcError as exc:
                record.error = record.error or f"{exc.code().name}: {exc.details()}"
                stop.set()
                return
            end = time.perf_counter()
            record.done.append((end, end - start))

    return channel, worker


async def run_load(
    url: str,
    protocol: str,
    model: str,
    inputs: Sequence[InputTensor],
    concurrency: int,
    on_window: Callable[[Record], float | None],
) -> Record:
    """Keep `concurrency` requests in flight until `on_window(record)`, called at each window's end,
    returns None; it returns the seconds until the next window's end otherwise."""
    record, stop = Record(), asyncio.Event()
    channel = None
    if protocol == "grpc":
        channel, grpc_worker = _grpc_workers(url, model, inputs)
        tasks = [asyncio.ensure_future(grpc_worker(record, stop)) for _ in range(concurrency)]
    else:
        request = http_request(url, model, inputs)
        tasks = [asyncio.ensure_future(_http_worker(url, request, record, stop)) for _ in range(concurrency)]
    try:
        wait = on_window(record)
        while wait is not None and not stop.is_set():
            await asyncio.wait(tasks, timeout=wait, return_when=asyncio.FIRST_EXCEPTION)
            failed = [t for t in tasks if t.done() and t.exception() is not None]
            if failed:
                raise LoadError(f"the load generator lost its connection: {failed[0].exception()!r}")
            wait = on_window(record)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if channel is not None:
            await channel.close()
    if record.error is not None:
        raise LoadError(record.error)
    return record
