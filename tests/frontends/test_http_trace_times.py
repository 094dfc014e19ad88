"""The connection layer's part in tracing: HTTP_RECV_START/END taken as a request arrives while tracing
is on (and not at all while it is off), HTTP_SEND_START/END around the writing of a traced request's
response (of each piece of a streamed one), and the trace closed once it is written, failed or
cancelled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nereid.frontends.http import error_response
from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer
from tests.frontends.test_http_protocol import _post, _read_response


@dataclass
class _Tracing:
    active: bool


@dataclass
class _Trace:
    """Records what the connection does to a trace."""

    events: list[tuple[str, int]] = field(default_factory=list)

    def now(self, name: str) -> None:
        self.events.append((name, time.perf_counter_ns()))

    def close(self) -> None:
        self.events.append(("close", time.perf_counter_ns()))

    def sent(self, start_name: str, start: int, end_name: str) -> None:
        self.events += [(start_name, start), (end_name, time.perf_counter_ns())]
        self.close()


async def _exchange(server: HttpServer, *requests: bytes) -> list[int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    statuses = []
    for request in requests:
        writer.write(request)
        statuses.append((await _read_response(reader))[0])
    writer.close()
    return statuses


def test_receive_times_are_taken_only_while_tracing_is_on() -> None:
    seen: list[tuple[int, int]] = []
    traces: list[_Trace] = []
    before = time.perf_counter_ns()

    async def handler(request: HttpRequest) -> HttpResponse:
        seen.append((request.recv_start, request.recv_end))
        if request.recv_start:
            trace = _Trace()
            traces.append(trace)
            request.trace = trace  # type: ignore[assignment]
        return HttpResponse(200, b"ok")

    async def scenario() -> None:
        tracing = _Tracing(active=False)
        server = HttpServer(handler, error_response, 1024, tracing=tracing)
        await server.start("127.0.0.1", 0)
        try:
            assert await _exchange(server, _post("/a", b"x")) == [200]
            tracing.active = True
            assert await _exchange(server, _post("/b", b"y" * 100)) == [200]
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
    (off, on), (trace,) = seen, traces
    assert off == (0, 0)
    assert before < on[0] <= on[1]
    names = [name for name, _ in trace.events]
    assert names == ["HTTP_SEND_START", "HTTP_SEND_END", "close"]
    times = [ns for _, ns in trace.events]
    assert on[1] <= times[0] <= times[1] <= times[2]


def test_a_traced_request_that_fails_is_closed_once() -> None:
    trace = _Trace()

    async def broken(request: HttpRequest) -> HttpResponse:
        request.trace = trace  # type: ignore[assignment]
        raise RuntimeError("bug")

    async def scenario() -> None:
        server = HttpServer(broken, error_response, 1024, tracing=_Tracing(active=True))
        await server.start("127.0.0.1", 0)
        try:
            assert await _exchange(server, _post("/x", b"")) == [500]
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
    assert [name for name, _ in trace.events] == ["HTTP_SEND_START", "HTTP_SEND_END", "close"]


def test_a_traced_request_whose_client_leaves_is_closed() -> None:
    closed = asyncio.Event()

    class _Watched(_Trace):
        def close(self) -> None:
            super().close()
            closed.set()

    trace = _Watched()
    started = asyncio.Event()

    async def hang(request: HttpRequest) -> HttpResponse:
        request.trace = trace  # type: ignore[assignment]
        started.set()
        await asyncio.Event().wait()
        return HttpResponse(200)

    async def scenario() -> None:
        server = HttpServer(hang, error_response, 1024, tracing=_Tracing(active=True))
        await server.start("127.0.0.1", 0)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/hang", b""))
            await asyncio.wait_for(started.wait(), 5)
            writer.close()  # the client goes away: the request is cancelled
            await asyncio.wait_for(closed.wait(), 5)
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
    assert [name for name, _ in trace.events] == ["close"]


def test_each_piece_of_a_streamed_response_is_sent_between_send_times() -> None:
    """As Triton records each generate_stream response; a piece with nothing to send records nothing."""
    trace = _Trace()

    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"a", b"", b"b"):
            trace.now(f"piece {piece.decode()}")
            yield piece

    async def streamed(request: HttpRequest) -> HttpResponse:
        request.trace = trace  # type: ignore[assignment]
        return HttpResponse(200, stream=pieces())

    async def scenario() -> None:
        server = HttpServer(streamed, error_response, 1024, tracing=_Tracing(active=True))
        await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/s", b"", "connection: close"))
            assert (await reader.read()).endswith(b"0\r\n\r\n")
            writer.close()
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
    assert [name for name, _ in trace.events] == [
        "piece a",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
        "piece ",
        "piece b",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
        "close",
    ]


def test_responses_answered_at_once_or_by_callback_are_traced_and_closed() -> None:
    """The callback path (a batched model's infer requests) and responses the handler returns at once get
    their send times and are closed by the connection, as awaited ones are; a cancelled one is closed."""
    from tests.frontends.test_http_protocol import _Later

    traces: dict[str, _Trace] = {}
    waiting: dict[str, _Later] = {}

    def handler(request: HttpRequest) -> HttpResponse | _Later:
        trace = traces[request.path] = _Trace()
        request.trace = trace  # type: ignore[assignment]
        if request.path == "/now":
            return HttpResponse(200, b"now")
        later = waiting[request.path] = _Later()
        return later

    async def scenario() -> None:
        server = HttpServer(handler, error_response, 1024, tracing=_Tracing(active=True))  # type: ignore[arg-type]
        await server.start("127.0.0.1", 0)
        try:
            assert await _exchange(server, _post("/now", b"")) == [200]
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/later", b""))
            while "/later" not in waiting or waiting["/later"].callback is None:
                await asyncio.sleep(0.01)
            callback = waiting["/later"].callback
            assert callback is not None
            callback(HttpResponse(200, b"later"))
            assert (await _read_response(reader))[2] == b"later"
            writer.write(_post("/gone", b""))
            while "/gone" not in waiting or waiting["/gone"].callback is None:
                await asyncio.sleep(0.01)
            writer.close()
            await asyncio.wait_for(waiting["/gone"].cancelled.wait(), 5)
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())
    for path in ("/now", "/later"):
        assert [name for name, _ in traces[path].events] == ["HTTP_SEND_START", "HTTP_SEND_END", "close"]
    assert [name for name, _ in traces["/gone"].events] == ["close"]
