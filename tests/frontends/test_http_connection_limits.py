"""Connections bounded in time and number: a request head or body that arrives too slowly is answered 408,
a chunk too large for the body limit is refused however its bytes arrive, and beyond the connection cap
new connections wait to be accepted while those open are served."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from nereid.frontends.http import error_response
from nereid.frontends.http.protocol import ConnectionLimits, HttpRequest, HttpResponse, HttpServer

_POST = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\n"


async def _ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, str(len(request.body)).encode())


@asynccontextmanager
async def _server(limits: ConnectionLimits, max_body_size: int = 1 << 20) -> AsyncIterator[HttpServer]:
    server = HttpServer(_ok, error_response, max_body_size, limits=limits)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop(1.0)


def _status(sock: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer:
        piece = sock.recv(4096)
        if not piece:
            break
        answer += piece
    return int(answer.split()[1])


def _trickle(port: int, first: bytes, piece: bytes, every_s: float, times: int) -> tuple[int, float]:
    """Send `first`, then `piece` every `every_s` for up to `times` pieces or until the server answers;
    the answer's status and how long it took."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(first)
        sock.settimeout(every_s)
        for _ in range(times):
            try:
                sock.sendall(piece)
                data = sock.recv(4096, socket.MSG_PEEK)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if data:
                break
        sock.settimeout(20)
        return _status(sock), time.monotonic() - start


_FAST = ConnectionLimits(header_timeout_s=0.5, body_timeout_s=0.5, body_min_rate=1000, max_connections=100)


@pytest.mark.parametrize(
    "first",
    [b"POST /v2/models/", b"POST /v2/models/m/infer HTTP/1.1\r\nx-slow: ", _POST + b"x-slow: "],
    ids=["request-line", "headers", "more-headers"],
)
def test_a_request_head_sent_a_byte_at_a_time_is_answered_408(first: bytes) -> None:
    async def scenario() -> None:
        async with _server(_FAST) as server:
            status, took = await asyncio.to_thread(_trickle, server.port, first, b"x", 0.1, 200)
            assert status == 408
            assert took < 10  # the header timeout (0.5 s) and a sweep, not the keep-alive one (60 s)

    asyncio.run(scenario())


def test_a_body_slower_than_the_minimum_rate_is_answered_408() -> None:
    async def scenario() -> None:
        async with _server(_FAST) as server:
            head = _POST + b"content-length: 100000\r\n\r\n"
            # 10 bytes every 0.1 s: 100 bytes/s, under 1000
            status, took = await asyncio.to_thread(_trickle, server.port, head, b"y" * 10, 0.1, 200)
            assert status == 408
            assert took < 10

    asyncio.run(scenario())


def test_a_body_that_keeps_its_rate_is_served() -> None:
    limits = ConnectionLimits(header_timeout_s=5, body_timeout_s=0.3, body_min_rate=1000, max_connections=100)

    async def scenario() -> None:
        async with _server(limits) as server:
            head = _POST + b"content-length: 6000\r\n\r\n"

            def send() -> int:
                with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
                    sock.sendall(head)
                    for _ in range(6):  # 1000 bytes every 0.1 s: 10,000 bytes/s, over a second
                        sock.sendall(b"z" * 1000)
                        time.sleep(0.1)
                    return _status(sock)

            assert await asyncio.to_thread(send) == 200

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [b"FFFFFFFF", b"100001", b"100001;ext=1"])
def test_a_chunk_too_large_is_refused_when_its_data_comes_in_the_same_read(size: bytes) -> None:
    head = _POST + b"transfer-encoding: chunked\r\n\r\n"

    async def scenario() -> None:
        # no time limit could answer instead: only the chunk check can
        limits = ConnectionLimits(
            header_timeout_s=60, body_timeout_s=60, body_min_rate=0, max_connections=100
        )
        async with _server(limits, max_body_size=1 << 20) as server:

            def send() -> int:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                    sock.sendall(head + size + b"\r\nabc")  # one read: the size line and some of its data
                    return _status(sock)

            assert await asyncio.to_thread(send) == 400

    asyncio.run(scenario())


def test_a_chunk_too_large_after_smaller_ones_in_one_read_is_refused() -> None:
    head = _POST + b"transfer-encoding: chunked\r\n\r\n"
    body = b"4\r\nabcd\r\n" + b"100000\r\n" + b"q" * 100

    async def scenario() -> None:
        limits = ConnectionLimits(
            header_timeout_s=60, body_timeout_s=60, body_min_rate=0, max_connections=100
        )
        async with _server(limits, max_body_size=1 << 20) as server:

            def send() -> int:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                    sock.sendall(head + body)  # 4 + 0x100000 bytes: over 1 MiB by 4
                    return _status(sock)

            assert await asyncio.to_thread(send) == 400

    asyncio.run(scenario())


def test_beyond_the_connection_cap_new_connections_wait_to_be_accepted() -> None:
    limits = ConnectionLimits(max_connections=2)
    request = b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n"

    async def scenario() -> None:
        async with _server(limits) as server:

            def clients() -> None:
                held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
                for sock in held:
                    sock.sendall(request)
                    assert _status(sock) == 200
                waiting = socket.create_connection(("127.0.0.1", server.port), timeout=0.5)
                waiting.sendall(request)  # queued by the kernel: the server takes it once a place is free
                with pytest.raises(TimeoutError):
                    waiting.recv(4096)
                held[0].sendall(request)  # those open are still served
                assert _status(held[0]) == 200
                held[0].close()
                waiting.settimeout(10)
                assert _status(waiting) == 200
                waiting.close()
                held[1].close()

            await asyncio.to_thread(clients)

    asyncio.run(scenario())


def _chunked(port: int, chunks: int) -> bytes:
    """A chunked body of `chunks` one-byte chunks; the whole answer."""
    head = _POST + b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        try:
            sock.sendall(b"1\r\nA\r\n" * chunks + b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the last chunk: the answer is still there to read
        answer = bytearray()
        while piece := sock.recv(1 << 16):
            answer += piece
    return bytes(answer)


def test_a_chunked_body_of_more_than_65536_non_empty_chunks_is_refused_with_tritons_text() -> None:
    async def scenario() -> None:
        async with _server(ConnectionLimits()) as server:
            at_limit = await asyncio.to_thread(_chunked, server.port, 1 << 16)
            assert at_limit.startswith(b"HTTP/1.1 200") and at_limit.endswith(b"65536")
            over = await asyncio.to_thread(_chunked, server.port, (1 << 16) + 1)
            assert over.startswith(b"HTTP/1.1 400")
            assert b"Chunked request body exceeds maximum of 65536 non-empty chunks." in over

    asyncio.run(scenario())
