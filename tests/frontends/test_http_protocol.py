"""The HTTP/1.1 connection layer on real sockets: keep-alive, pipelining, limits, refusals, cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from nereid.exit_countdown import ExitCountdown
from nereid.frontends.http import error_response, protocol
from nereid.frontends.http.protocol import DeferredResponse, HttpRequest, HttpResponse, HttpServer

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


async def _echo(request: HttpRequest) -> HttpResponse:
    """Answers with what it was sent, so tests can see how the request was parsed."""
    summary = {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "size": len(request.body),
    }
    return HttpResponse(200, orjson.dumps(summary) + request.body, [(b"content-type", b"application/json")])


@asynccontextmanager
async def _server(handler: Handler = _echo, max_body_size: int = 1024) -> AsyncIterator[HttpServer]:
    server = HttpServer(handler, error_response, max_body_size)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop(1.0)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: x", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_keep_alive_and_pipelined_requests_answer_in_order() -> None:
    async def scenario() -> None:
        async with _server() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            # 40 requests in one write: more than the pipelining window, so reading pauses and resumes
            writer.write(b"".join(_post(f"/r{i}?n={i}", b"x" * i) for i in range(40)))
            for i in range(40):
                status, headers, body = await _read_response(reader)
                assert status == 200 and "connection" not in headers
                summary = orjson.loads(body[: len(body) - i])
                assert summary == {"method": "POST", "path": f"/r{i}", "query": f"n={i}", "size": i}
            writer.close()

    asyncio.run(scenario())


def test_connection_close_and_http10_end_the_connection() -> None:
    async def scenario() -> None:
        async with _server() as server:
            for request in (
                b"GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                b"GET /a HTTP/1.0\r\n\r\n",
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(request)
                status, headers, _ = await _read_response(reader)
                assert status == 200 and headers["connection"] == "close"
                assert await reader.read() == b""  # the server closed its side
                writer.close()

    asyncio.run(scenario())


def test_chunked_body_is_joined() -> None:
    async def scenario() -> None:
        async with _server() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
            )
            status, _, body = await _read_response(reader)
            assert status == 200 and body.endswith(b"abcdefg") and orjson.loads(body[:-7])["size"] == 7
            writer.close()

    asyncio.run(scenario())


def test_chunks_frame_a_body_that_also_declares_a_length_and_the_connection_ends() -> None:
    """Both Content-Length and chunked Transfer-Encoding (RFC 9112, 6.3): the chunks frame the body, a
    Content-Length over the limit does not matter, and the connection closes after the answer, so that a
    request pipelined behind it (framed by the length, it would be another) is never served."""

    async def scenario() -> None:
        async with _server(max_body_size=100) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                b"POST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\ntransfer-encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n" + _post("/next", b"")
            )
            status, headers, body = await _read_response(reader)
            assert status == 200 and headers["connection"] == "close"
            assert body.endswith(b"abcdefg") and orjson.loads(body[:-7])["size"] == 7
            assert await reader.read() == b""
            writer.close()

    asyncio.run(scenario())


def test_oversized_bodies_are_refused_and_the_connection_closed() -> None:
    async def scenario() -> None:
        async with _server(max_body_size=100) as server:
            # declared too large: refused before the body is read
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/big", b"y" * 101))
            status, headers, body = await _read_response(reader)
            assert status == 400 and headers["connection"] == "close"
            assert orjson.loads(body)["error"] == (
                "request JSON size of 101 bytes exceeds the maximum allowed input size of 100 bytes. "
                "Use --http-max-input-size to increase the limit."
            )
            assert await reader.read() == b""
            writer.close()
            # chunked, found too large as it arrives
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            chunk = b"z" * 80
            writer.write(
                b"POST /big HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                + b"50\r\n"
                + chunk
                + b"\r\n"
                + b"50\r\n"
                + chunk
                + b"\r\n0\r\n\r\n"
            )
            status, _, body = await _read_response(reader)
            assert status == 400 and "--http-max-input-size" in orjson.loads(body)["error"]
            writer.close()
            # a raw binary body (no JSON header): Triton's text for raw input
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/big", b"y" * 101, "inference-header-content-length: 0"))
            status, _, body = await _read_response(reader)
            assert status == 400 and orjson.loads(body)["error"].startswith(
                "Raw input has a byte_size (101 bytes) that exceeds the maximum allowed value of 100 bytes."
            )
            writer.close()

    asyncio.run(scenario())


def test_refusal_waits_for_the_request_before_it() -> None:
    async def scenario() -> None:
        async with _server(max_body_size=100) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/ok", b"a") + _post("/big", b"b" * 200))
            first = await _read_response(reader)
            second = await _read_response(reader)
            assert first[0] == 200 and orjson.loads(first[2][:-1])["path"] == "/ok"
            assert second[0] == 400
            writer.close()

    asyncio.run(scenario())


def test_malformed_request_gets_400_and_server_keeps_serving() -> None:
    async def scenario() -> None:
        async with _server() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            status, headers, body = await _read_response(reader)
            assert status == 400 and headers["connection"] == "close"
            assert "malformed HTTP request" in orjson.loads(body)["error"]
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/fine", b""))
            assert (await _read_response(reader))[0] == 200
            writer.close()

    asyncio.run(scenario())


def test_expect_100_continue() -> None:
    async def scenario() -> None:
        async with _server() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n")
            assert await reader.readline() == b"HTTP/1.1 100 Continue\r\n"
            assert await reader.readline() == b"\r\n"
            writer.write(b"ok")
            status, _, body = await _read_response(reader)
            assert status == 200 and body.endswith(b"ok")
            writer.close()

    asyncio.run(scenario())


def test_client_leaving_cancels_its_request() -> None:
    async def scenario() -> None:
        started = asyncio.Event()
        cancelled = asyncio.Event()

        async def slow(request: HttpRequest) -> HttpResponse:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("unreachable")

        async with _server(slow) as server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/slow", b""))
            await asyncio.wait_for(started.wait(), 5)
            writer.close()
            await asyncio.wait_for(cancelled.wait(), 5)

    asyncio.run(scenario())


def test_stop_lets_requests_in_flight_finish() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        started = asyncio.Event()

        async def gated(request: HttpRequest) -> HttpResponse:
            started.set()
            await release.wait()
            return HttpResponse(200, b"done")

        server = HttpServer(gated, error_response, 1024)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_post("/g", b""))
        await asyncio.wait_for(started.wait(), 5)
        stopping = asyncio.create_task(server.stop(10.0))
        await asyncio.sleep(0)  # let stop() close the listener before the request is released
        assert not stopping.done()
        release.set()
        status, headers, body = await _read_response(reader)
        assert (status, body, headers["connection"]) == (200, b"done", "close")
        await asyncio.wait_for(stopping, 5)
        writer.close()

    asyncio.run(scenario())


def test_with_a_countdown_open_connections_serve_until_their_clients_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The inference endpoint at SIGINT or SIGTERM, as Triton's: no new connection is taken, while an open
    one goes on serving requests, kept alive, until its client closes it; said once a second."""

    async def scenario() -> None:
        server = HttpServer(_echo, error_response, 1024)
        await server.start("127.0.0.1", 0)
        port = server.port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post("/before", b""))
        assert (await _read_response(reader))[0] == 200
        stopping = asyncio.create_task(server.stop(30.0, ExitCountdown(30)))
        await asyncio.sleep(0)  # stop() has closed the listener
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post("/after", b""))
        status, headers, body = await _read_response(reader)
        assert status == 200 and "connection" not in headers and b'"/after"' in body
        assert not stopping.done()
        writer.close()
        await asyncio.wait_for(stopping, 5)  # as soon as the client has gone, not a second later

    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records] == ["Timeout 30: Found 1 HTTP service connections"]


def test_with_a_countdown_a_client_that_stays_is_closed_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        server = HttpServer(_echo, error_response, 1024)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_post("/once", b""))
        assert (await _read_response(reader))[0] == 200
        loop = asyncio.get_running_loop()
        start = loop.time()
        await server.stop(1.0, ExitCountdown(1))
        assert 0.9 < loop.time() - start < 3
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the idle connection is closed
        writer.close()

    with caplog.at_level(logging.INFO, logger="nereid"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records] == ["Timeout 1: Found 1 HTTP service connections"]


def test_handler_bug_is_answered_500() -> None:
    async def broken(request: HttpRequest) -> HttpResponse:
        raise RuntimeError("bug")

    async def scenario() -> None:
        async with _server(broken) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/x", b"") + _post("/y", b""))
            assert (await _read_response(reader))[0] == 500
            assert (await _read_response(reader))[0] == 500  # the connection still serves
            writer.close()

    asyncio.run(scenario())


def test_idle_connections_are_closed_after_the_keep_alive_timeout() -> None:
    async def scenario() -> None:
        server = HttpServer(_echo, error_response, 1024, keep_alive_timeout_s=0.2)
        await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/once", b""))
            assert (await _read_response(reader))[0] == 200
            # left idle, the connection is closed by the server (well before this 10 s bound)
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        finally:
            await server.stop(1.0)

    asyncio.run(scenario())


def test_a_taken_port_is_refused_unless_both_servers_reuse_it() -> None:
    """--reuse-http-port: two servers share a port only when both ask to; otherwise binding fails."""

    async def scenario() -> None:
        first = HttpServer(_echo, error_response, 1024)
        await first.start("127.0.0.1", 0, reuse_port=True)
        try:
            with pytest.raises(OSError):
                await HttpServer(_echo, error_response, 1024).start("127.0.0.1", first.port)
            second = HttpServer(_echo, error_response, 1024)
            await second.start("127.0.0.1", first.port, reuse_port=True)
            try:
                assert second.port == first.port
                for _ in range(2):  # whichever of the two takes the connection answers
                    reader, writer = await asyncio.open_connection("127.0.0.1", first.port)
                    writer.write(_post("/shared", b"ok"))
                    status, _, body = await _read_response(reader)
                    assert status == 200 and body.endswith(b"ok")
                    writer.close()
            finally:
                await second.stop(1.0)
        finally:
            await first.stop(1.0)

    asyncio.run(scenario())


def test_stop_answers_a_request_already_in_the_socket_instead_of_resetting() -> None:
    async def scenario() -> None:
        async with _server() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/first", b""))
            await _read_response(reader)  # the connection is now idle, kept alive
            # written at once (the transport's buffer is empty), so it is in the server's socket buffer, but
            # not yet read by the server's side of the event loop
            writer.write(_post("/second", b"x"))
            await server.stop(1.0)
            status, headers, body = await _read_response(reader)
            assert status == 200 and headers.get("connection") == "close"
            assert b'"/second"' in body
            writer.close()

    asyncio.run(scenario())


def test_stop_answers_a_request_still_running_at_the_deadline_with_503() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def hang(request: HttpRequest) -> HttpResponse:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return HttpResponse(200)

    async def scenario() -> None:
        server = HttpServer(hang, error_response, 1024)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_post("/hang", b""))
        await started.wait()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await server.stop(0.3)
        assert 0.25 < loop.time() - start < 2
        status, headers, body = await _read_response(reader)
        assert status == 503 and headers.get("connection") == "close"
        assert b"did not finish in 0.3 s" in body
        assert await reader.read() == b""
        await asyncio.sleep(0)
        assert cancelled == [True]
        writer.close()

    asyncio.run(scenario())


_REQUEST_VALUE: contextvars.ContextVar[str] = contextvars.ContextVar("request_value", default="unset")


def test_each_request_runs_in_a_task_and_a_context_of_its_own() -> None:
    """Handlers may rely on asyncio.wait_for from their first line (it needs a current Task on Python 3.12
    and later, where handlers are Tasks from the start), and on a contextvars context that no other
    request sees."""
    seen: list[tuple[bool, str, bool]] = []

    async def handler(request: HttpRequest) -> HttpResponse:
        task = asyncio.current_task()
        before = _REQUEST_VALUE.get()
        _REQUEST_VALUE.set(request.path)
        # a wait that needs a Task on 3.12+, and that neither waits long nor fails
        answered = await asyncio.wait_for(asyncio.sleep(0, result=True), 5)
        in_its_task = task is asyncio.current_task() if sys.version_info >= (3, 12) else True
        seen.append((in_its_task, before, answered))
        return HttpResponse(200, request.path.encode())

    async def scenario() -> None:
        async with _server(handler) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /first HTTP/1.1\r\nhost: x\r\n\r\nGET /second HTTP/1.1\r\nhost: x\r\n\r\n")
            for path in (b"/first", b"/second"):
                status, _, body = await _read_response(reader)
                assert (status, body) == (200, path)
            writer.close()

    asyncio.run(scenario())
    assert seen == [(True, "unset", True), (True, "unset", True)]


class _Later(DeferredResponse):
    """A response that a test hands over by callback, or cancels."""

    __slots__ = ("callback", "cancelled")

    def __init__(self) -> None:
        self.callback: Callable[[HttpResponse], None] | None = None
        self.cancelled = asyncio.Event()

    def then(self, callback: Callable[[HttpResponse], None]) -> None:
        self.callback = callback

    def cancel(self) -> None:
        self.cancelled.set()


def test_deferred_responses_answer_by_callback_in_order() -> None:
    async def scenario() -> None:
        waiting: list[_Later] = []

        def handler(request: HttpRequest) -> _Later | HttpResponse:
            if request.path == "/now":  # a response handed back at once, with no coroutine
                return HttpResponse(200, b"now")
            later = _Later()
            waiting.append(later)
            return later

        async with _server(handler) as server:  # type: ignore[arg-type]
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/a", b"") + _post("/now", b"") + _post("/b", b""))
            while not waiting:
                await asyncio.sleep(0.01)
            assert len(waiting) == 1  # the next requests wait for the first answer (pipelining)
            first = waiting[0].callback
            assert first is not None
            first(HttpResponse(200, b"a"))
            assert (await _read_response(reader))[2] == b"a"
            assert (await _read_response(reader))[2] == b"now"
            while len(waiting) < 2:
                await asyncio.sleep(0.01)
            second = waiting[1].callback
            assert second is not None
            second(HttpResponse(201, b"b"))
            assert (await _read_response(reader))[:3:2] == (201, b"b")
            writer.close()

    asyncio.run(scenario())


def test_client_leaving_cancels_its_deferred_response() -> None:
    async def scenario() -> None:
        later = _Later()

        async with _server(lambda request: later) as server:  # type: ignore[arg-type,return-value]
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_post("/slow", b""))
            while later.callback is None:
                await asyncio.sleep(0.01)
            writer.close()
            await asyncio.wait_for(later.cancelled.wait(), 5)
            assert not server._connections  # and nothing waits for it any more
            later.callback(HttpResponse(200, b"late"))  # an answer after the cancellation goes nowhere

    asyncio.run(scenario())


def test_header_names_read_in_any_case_are_keyed_in_lower_case_and_their_table_is_bounded() -> None:
    seen: list[dict[str, str]] = []

    async def headers(request: HttpRequest) -> HttpResponse:
        seen.append(dict(request.headers))
        return HttpResponse(200, b"", [])

    async def scenario() -> None:
        async with _server(headers) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            names = ["X-Custom", "x-custom", "X-CUSTOM"] + [f"X-Name-{i}" for i in range(1100)]
            for name in names:
                writer.write(_post("/h", b"", f"{name}: v"))
                assert (await _read_response(reader))[0] == 200
            writer.close()

    asyncio.run(scenario())
    assert [h.get("x-custom") for h in seen[:3]] == ["v", "v", "v"]
    assert all(h["host"] == "x" and h[f"x-name-{i}"] == "v" for i, h in enumerate(seen[3:]))
    assert len(protocol._HEADER_KEYS) <= protocol._MAX_HEADER_KEYS
