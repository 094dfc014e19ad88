"""A request's body is freed when its connection closes, not when the cyclic collector next runs.

The server lets the collector run rarely (heap.py), so anything a closed connection leaves in a reference
cycle stays in memory for many requests: with bodies of tens of MiB, gigabytes. These tests turn the
collector off, serve requests on connections of their own, and then ask it what it would have had to
free: nothing of a connection or a request may be among it.
"""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from nereid.frontends.http import error_response
from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer

_BODY = b"b" * (1 << 20)
_ABANDONED = b"x-leaves: early"  # a request its client does not finish


async def _ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, str(len(request.body)).encode())


@contextmanager
def _collector_off() -> Iterator[list[object]]:
    """The collector off while the block runs; then the list holds what a collection would free."""
    garbage: list[object] = []
    gc.collect()
    gc.disable()
    try:
        yield garbage
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _send(port: int, data: bytes) -> bytes:
    """Send `data` and read the answer until the server closes; a request that is not whole is sent and
    left (its client goes away)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if _ABANDONED in data:
            return b""
        answer = b""
        while True:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            answer += piece
        return answer


async def _until_closed(server: HttpServer) -> None:
    """Until the server has seen every connection close."""
    for _ in range(1000):
        if not server._connections:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("connections still open")


def _head(length: int, chunked: bool = False) -> bytes:
    framing = b"transfer-encoding: chunked" if chunked else b"content-length: %d" % length
    return b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\n" + framing + b"\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        _head(len(_BODY)) + _BODY,  # served
        _head(len(_BODY) * 2) + _BODY,  # refused by its declared length
        _head(0, chunked=True) + b"%x\r\n" % len(_BODY) + _BODY + b"\r\n" + b"%x\r\n" % len(_BODY) + _BODY,
        _head(len(_BODY)).replace(b"host: x", b"host: x\r\n" + _ABANDONED) + _BODY[:1000],
    ],
    ids=["served", "refused-by-length", "refused-as-it-arrives", "abandoned"],
)
def test_a_closed_connection_leaves_nothing_for_the_cyclic_collector(request_bytes: bytes) -> None:
    async def scenario() -> None:
        server = HttpServer(_ok, error_response, max_body_size=len(_BODY) + 100)
        await server.start("127.0.0.1", 0)
        try:
            for _ in range(3):
                await asyncio.to_thread(_send, server.port, request_bytes)
            await _until_closed(server)
        finally:
            await server.stop(1.0)

    with _collector_off() as garbage:
        asyncio.run(scenario())
    kept = {type(item).__name__ for item in garbage} & {"_Connection", "HttpRequest", "HttpRequestParser"}
    assert not kept, f"left in reference cycles: {kept}"
