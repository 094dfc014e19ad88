"""Requests served from a known head's bytes, without httptools: the same answers and the same connection
behaviour as when httptools reads them, for plain requests and for everything around them that it must
still read (unknown or unusual heads, split heads, bodies in pieces, refusals, garbage)."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from nereid.frontends.http import HttpFrontend, error_response, heads
from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer, _Connection
from nereid.server import build_engine
from nereid.settings import ServerSettings

MODELS = Path(__file__).parent / "queued_models"
LIMIT = 100  # the server's largest body


def _head(method: str, target: str, *headers: str, version: str = "1.1") -> bytes:
    return ("\r\n".join([f"{method} {target} HTTP/{version}", *headers]) + "\r\n\r\n").encode()


def _infer(body: bytes, *extra: str) -> bytes:
    """perf_analyzer's request (libcurl's head), with `body`."""
    return _head(
        "POST",
        "/v2/models/add_sub/infer",
        "Host: 127.0.0.1:8000",
        "User-Agent: libcurl-agent/1.0",
        "Accept: */*",
        "Inference-Header-Content-Length: 7",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
        *extra,
    )


INFER = _infer(b"0123456789")
BODY = b"0123456789"
OTHER_BODY = b"abcdefghij"
HEALTH = _head("GET", "/v2/health/ready", "Host: x")
METADATA = _head("GET", "/v2/models/add_sub?verbose=1", "Host: x", "Accept: a", "accept: b")
CLOSE = _head("GET", "/v2/health/live", "Host: x", "Connection: close")
HTTP10 = _head("GET", "/v2/health/live", version="1.0")
HTTP10_KEPT = _head("GET", "/v2/health/live", "Connection: keep-alive", version="1.0")
CHUNKED = _head("POST", "/c", "Host: x", "Transfer-Encoding: chunked") + b"3\r\nabc\r\n0\r\n\r\n"
BOTH_FRAMINGS = (
    _head("POST", "/c", "Host: x", "Content-Length: 3", "Transfer-Encoding: chunked")
    + b"3\r\nabc\r\n0\r\n\r\n"
)
EXPECT = _head("POST", "/e", "Host: x", "Content-Length: 2", "Expect: 100-continue")
UPGRADE = _head("GET", "/u", "Host: x", "Connection: Upgrade", "Upgrade: websocket")
COMPRESSED = _infer(BODY, "Content-Encoding: gzip", "Accept-Encoding: gzip")
OVERSIZED = _infer(b"x" * (LIMIT + 1))
RAW_OVERSIZED = _head("POST", "/raw", "Inference-Header-Content-Length: 0", f"Content-Length: {LIMIT + 5}")


class _Transport(asyncio.Transport):
    """Records what the connection does to it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, bytes] | str] = []
        self.protocol: _Connection | None = None
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.events.append(("write", bytes(data)))

    def writelines(self, data: Any) -> None:
        self.write(b"".join(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.events.append("eof")

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self.events.append("close")
        if not self._closing and self.protocol is not None:
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)
        self._closing = True

    def pause_reading(self) -> None:
        self.events.append("pause")

    def resume_reading(self) -> None:
        self.events.append("resume")


class _CountingParser:
    """httptools' parser, counting what it is fed."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser
        self.fed = 0

    def feed_data(self, data: bytes) -> None:
        self.fed += 1
        self._parser.feed_data(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


class _Forgetful(heads.HeadCache):
    """Keeps no head: httptools reads every request."""

    __slots__ = ()

    def remember(self, key: bytes, head: heads.Head) -> None:
        pass


def _echo(request: HttpRequest) -> HttpResponse:
    """What the request was parsed into; then it changes its headers, which no later request may see."""
    summary = orjson.dumps(
        [request.method, request.path, request.query, sorted(request.headers.items()), request.body.hex()]
    )
    request.headers["x-changed"] = "by the handler"
    return HttpResponse(200, summary, [(b"content-type", b"application/json")])


async def _later(request: HttpRequest) -> HttpResponse:
    """Answers after a turn of the loop, so that what follows a request waits for it (pipelining)."""
    await asyncio.sleep(0)
    return _echo(request)


async def _settle(connection: _Connection | None = None) -> None:
    """Turn the loop until the connection has answered all it read (and a few more times)."""
    for _ in range(10_000):
        if connection is None or not (connection.busy or connection._pending):
            break
        await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)


async def _converse(
    server: HttpServer, reads: list[bytes], settle_between: bool = True
) -> tuple[list[tuple[str, bytes] | str], int]:
    """Feed `reads` to a new connection; what it did to its transport, and how often httptools was fed."""
    connection, transport = _Connection(server), _Transport()
    transport.protocol = connection
    parser = connection._parser = _CountingParser(connection._parser)  # type: ignore[assignment]
    connection.connection_made(transport)
    for data in reads:
        if transport.is_closing():
            break  # a real transport reads nothing more once closed
        connection.data_received(data)
        if settle_between:
            await _settle(connection)
    await _settle(connection)
    return list(transport.events), parser.fed


def _run(
    reads: list[bytes],
    learn: list[bytes],
    handler: Callable[[HttpRequest], Any] = _echo,
    settle_between: bool = True,
) -> tuple[tuple[list[Any], int], tuple[list[Any], int]]:
    """The conversation with httptools reading everything (cold), and again once the heads of the requests
    in `learn` are known (warm)."""

    async def scenario() -> tuple[tuple[list[Any], int], tuple[list[Any], int]]:
        cold_server = HttpServer(handler, error_response, LIMIT)
        cold_server._heads = _Forgetful()
        cold = await _converse(cold_server, reads, settle_between)
        warm_server = HttpServer(handler, error_response, LIMIT)
        for request in learn:
            events, fed = await _converse(warm_server, [request])
            assert fed == 1 and events[0][0] == "write"  # type: ignore[index]
        known = len(warm_server._heads)
        warm = await _converse(warm_server, reads, settle_between)
        assert len(warm_server._heads) >= known  # nothing forgotten, so the warm run had them all
        return cold, warm

    return asyncio.run(scenario())


SCENARIOS = {
    # name: (reads, requests whose heads are learned first, how often httptools is fed when warm)
    "repeated infer": ([INFER + BODY, INFER + OTHER_BODY, INFER + BODY], [INFER + BODY], 0),
    "health and metadata": ([HEALTH, METADATA, HEALTH, METADATA], [HEALTH, METADATA], 0),
    "head and body apart": ([INFER, BODY, INFER, OTHER_BODY], [INFER + BODY], 0),
    "body in pieces": ([INFER + b"01", b"234", b"5678", b"9" + INFER, BODY], [INFER + BODY], 0),
    "pipelined in one read": ([INFER + BODY + HEALTH + INFER + OTHER_BODY], [INFER + BODY, HEALTH], 0),
    "a known head then a new one": ([INFER + BODY + METADATA + INFER + BODY], [INFER + BODY], 1),
    "head split across reads": ([INFER[:20], INFER[20:] + BODY, INFER + BODY], [INFER + BODY], 2),
    "close after known": ([HEALTH, HEALTH, CLOSE], [HEALTH, CLOSE], 1),
    # whether the last read comes before the connection closes depends on the handler: not counted
    "a read after close": ([CLOSE, HEALTH], [HEALTH, CLOSE], None),
    "close in the same read": ([HEALTH + CLOSE + HEALTH], [HEALTH, CLOSE], 1),
    "http/1.0": ([HTTP10], [HTTP10], 1),
    "http/1.0 kept alive": ([HTTP10_KEPT, HTTP10_KEPT, HEALTH], [HTTP10_KEPT, HEALTH], 0),
    "chunked after known": ([INFER + BODY, CHUNKED, INFER + BODY], [INFER + BODY, CHUNKED], 1),
    "both framings after known": ([INFER + BODY + BOTH_FRAMINGS + HEALTH], [INFER + BODY, HEALTH], 1),
    "expect after known": ([HEALTH + EXPECT, b"ok", HEALTH], [HEALTH, EXPECT + b"ok"], 2),
    "upgrade after known": ([HEALTH + UPGRADE, HEALTH], [HEALTH, UPGRADE], 2),
    "compression headers": ([COMPRESSED + BODY, COMPRESSED + OTHER_BODY], [COMPRESSED + BODY], 0),
    "oversized after known": ([INFER + BODY, OVERSIZED, INFER + BODY], [INFER + BODY], 1),
    "raw oversized after known": ([HEALTH + RAW_OVERSIZED], [HEALTH], 1),
    "garbage after a known head": ([INFER + BODY + b"NOT HTTP\r\n\r\n", HEALTH], [INFER + BODY], 1),
    "garbage in the next read": ([INFER + BODY, b"\x00\x01 nonsense\r\n\r\n", HEALTH], [INFER + BODY], 1),
    "garbage as a body": ([INFER, b"\r\n\r\nGET / ", HEALTH], [INFER + BODY, HEALTH], 0),
    "leading blank line": ([b"\r\n" + HEALTH, HEALTH], [HEALTH], 1),
    "blank lines, then a head in pieces": (
        [b"\r\n\r\n", b"GET /x HTTP/1.1\r\n", b"\r\n", b"\r\n\r\nGET /x HTTP/1.1\r\n\r\n"],
        [],
        4,
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("handler", [_echo, _later], ids=["at once", "after a turn"])
@pytest.mark.parametrize("settle_between", [True, False], ids=["answered between reads", "reads in a row"])
def test_known_heads_answer_as_httptools_would(
    name: str, handler: Callable[[HttpRequest], Any], settle_between: bool
) -> None:
    """Each read is fed once the answers to the reads before it are written, or at once (requests
    arrive while others are answered, and after a request that closes the connection)."""
    reads, learn, warm_feeds = SCENARIOS[name]
    (cold_events, cold_fed), (warm_events, warm_fed) = _run(reads, learn, handler, settle_between)
    assert warm_events == cold_events
    assert any(event[0] == "write" for event in cold_events)
    assert cold_fed >= 1 and warm_fed == (warm_fed if warm_feeds is None else warm_feeds)


def test_the_answers_are_what_the_request_said() -> None:
    """The comparisons above hold something worth comparing: parsed requests, a refusal, a close."""
    (events, _), _ = _run([INFER + BODY + METADATA, OVERSIZED], [])
    first, second, third = (event for event in events if event[0] == "write")
    assert first[0] == "write" and first[1].startswith(b"HTTP/1.1 200 OK\r\n")  # type: ignore[index]
    method, path, query, headers, body = orjson.loads(first[1].partition(b"\r\n\r\n")[2])  # type: ignore[index]
    assert (method, path, query, bytes.fromhex(body)) == ("POST", "/v2/models/add_sub/infer", "", BODY)
    assert ["content-length", "10"] in headers and not any(name == "x-changed" for name, _ in headers)
    assert b'[["accept","a, b"]' in second[1]  # type: ignore[index]
    assert third[1].startswith(b"HTTP/1.1 400 Bad Request\r\n")  # type: ignore[index]
    assert b"connection: close" in third[1]  # type: ignore[index]


def test_a_request_is_answered_only_when_its_whole_body_is_read() -> None:
    async def scenario() -> None:
        server = HttpServer(_echo, error_response, LIMIT)
        await _converse(server, [INFER + BODY])
        connection, transport = _Connection(server), _Transport()
        connection.connection_made(transport)
        connection.data_received(INFER + BODY[:9])
        await _settle()
        assert transport.events == []
        connection.data_received(BODY[9:] + HEALTH[:5])
        await _settle()
        assert len(transport.events) == 1
        connection.data_received(HEALTH[5:])
        await _settle()
        assert len(transport.events) == 2 and b"/v2/health/ready" in transport.events[1][1]  # type: ignore[index]

    asyncio.run(scenario())


def test_pipelining_pauses_reading_for_known_heads_as_for_others() -> None:
    many = [(INFER + BODY) * 40]
    (cold_events, _), (warm_events, warm_fed) = _run(many, [INFER + BODY], _later)
    assert warm_events == cold_events and warm_fed == 0
    assert "pause" in warm_events and "resume" in warm_events
    assert sum(event[0] == "write" for event in warm_events) == 40


def test_unusual_heads_are_not_kept() -> None:
    async def scenario() -> None:
        server = HttpServer(_echo, error_response, LIMIT)
        for request in (CLOSE, HTTP10, CHUNKED, BOTH_FRAMINGS, EXPECT + b"ok", UPGRADE, b"\r\n" + HEALTH):
            await _converse(server, [request])
        assert len(server._heads) == 0
        await _converse(server, [INFER[:30], INFER[30:] + BODY])  # a head split across reads
        assert len(server._heads) == 0
        await _converse(server, [HEALTH + METADATA])  # only a read's first request
        assert len(server._heads) == 1

    asyncio.run(scenario())


def test_only_heads_whose_bytes_are_the_lines_parsed_are_plain() -> None:
    """The key must end where the parser's header section ended: a parser more lenient than this one
    (bare LF, folded lines) could end it elsewhere."""
    headers = {"host": "x"}
    assert heads.plain(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "1.1", headers, 1, True)
    for key in (
        b"GET / HTTP/1.1\r\nHost: x\n\nGET /b HTTP/1.1\r\n\r\n",  # a head ended by LF LF, then another
        b"GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n",  # a folded line
        b"GET / HTTP/1.1\r\nHost: x\r\r\n\r\n",  # a bare CR
        b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a blank line first
    ):
        assert not heads.plain(key, "GET", "1.1", headers, 1, True), key
    # blank lines, read as the head of a request with no headers that began in a later read
    assert not heads.plain(b"\r\n\r\n", "GET", "1.1", {}, 0, True)
    key = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert not heads.plain(key, "GET", "2.0", headers, 1, True)
    assert not heads.plain(key, "CONNECT", "1.1", headers, 1, True)
    assert not heads.plain(key, "GET", "1.1", headers, 1, False)
    for unusual in ({"content-length": "1, 1"}, {"connection": "upgrade"}, {"expect": "x"}):
        assert not heads.plain(key, "GET", "1.1", unusual, 1, True), unusual


def test_the_table_is_bounded_when_heads_keep_changing() -> None:
    async def scenario() -> None:
        server = HttpServer(_echo, error_response, LIMIT)
        reads = [_head("GET", "/v2/health/ready", f"X-Request-Id: {i}") for i in range(heads.MAX_HEADS * 3)]
        events, fed = await _converse(server, reads)
        assert fed == len(reads) and sum(event[0] == "write" for event in events) == len(reads)
        assert 0 < len(server._heads) <= heads.MAX_HEADS
        long = _head("GET", "/", "X-Long: " + "y" * heads.MAX_HEAD_BYTES)
        server = HttpServer(_echo, error_response, LIMIT)
        await _converse(server, [long])
        assert len(server._heads) == 0

    asyncio.run(scenario())


def test_each_server_keeps_its_own_heads_and_limits() -> None:
    async def scenario() -> None:
        large = HttpServer(_echo, error_response, 1000)
        await _converse(large, [OVERSIZED + b"x" * (LIMIT + 1)])
        assert len(large._heads) == 1
        small = HttpServer(_echo, error_response, LIMIT)
        events, _ = await _converse(small, [OVERSIZED + b"x" * (LIMIT + 1)])
        assert [event[1][:12] for event in events if event[0] == "write"] == [b"HTTP/1.1 400"]

    asyncio.run(scenario())


def _echo_model_request(value: float, *extra: str) -> bytes:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}}
            ]
        }
    )
    body = header + struct.pack("<f", value)
    head = _head(
        "POST",
        "/v2/models/echo/infer",
        "Host: 127.0.0.1",
        f"Inference-Header-Content-Length: {len(header)}",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
        *extra,
    )
    return head + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


def test_a_real_server_answers_repeated_requests_from_their_known_head(tmp_path: Path) -> None:
    shutil.copytree(MODELS / "echo", tmp_path / "models" / "echo")
    settings = ServerSettings(model_repositories=(tmp_path / "models",))
    engine = build_engine(settings)

    async def scenario() -> None:
        frontend = HttpFrontend(engine, settings)
        server = HttpServer(frontend.dispatch, error_response, 1 << 20)
        await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            answers = []
            for i in range(4):
                request = _echo_model_request(float(i))
                if i % 2:  # head and body in two writes, as libcurl sends them
                    split = request.index(b"\r\n\r\n") + 4
                    writer.write(request[:split])
                    await writer.drain()
                    await asyncio.sleep(0.01)
                    writer.write(request[split:])
                else:
                    writer.write(request)
                answers.append(await _read_response(reader))
                if i == 0:  # from now on, count what httptools reads
                    (connection,) = server._connections
                    parser = connection._parser = _CountingParser(connection._parser)  # type: ignore[assignment]
            assert len(server._heads) == 1 and parser.fed == 0
            for i, (head, body) in enumerate(answers):
                assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head == answers[0][0]
                assert orjson.loads(body)["outputs"][0]["data"] == [float(i)]
            # compressed answers, from a known head too
            for _ in range(2):
                writer.write(_echo_model_request(7.0, "Accept-Encoding: gzip"))
                head, body = await _read_response(reader)
                assert b"content-encoding: gzip" in head.lower()
                assert orjson.loads(gzip.decompress(body))["outputs"][0]["data"] == [7.0]
            assert len(server._heads) == 2 and parser.fed == 1  # the first compressed request only
            writer.close()
        finally:
            await server.stop(1.0)

    try:
        asyncio.run(scenario())
    finally:
        engine.shutdown()
