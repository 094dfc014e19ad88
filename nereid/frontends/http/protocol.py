"""HTTP/1.1 connections on asyncio, parsed by httptools, each request handed whole to one handler.

Why not an ASGI server: the infer path of a small model costs about as much as the ASGI layer around it
(scope and message dicts, a receive/send round trip per body, two socket writes per response). Here a
request arrives as one object with its whole body, and its response leaves in one write.

Per connection, requests are answered one at a time and in order (HTTP/1.1 pipelining); parsing pauses
while the client does not read its responses or sends too far ahead. A request whose head is one httptools
already read as plain is served from that reading, by its bytes (heads.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import http
import logging
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import httptools

from nereid.frontends.http.heads import HEAD_END, MAX_HEAD_BYTES, Head, HeadCache, plain
from nereid.frontends.http.listener import Listener, default_max_connections
from nereid.tracing.trace import HTTP_SEND_END, HTTP_SEND_START

if TYPE_CHECKING:
    from nereid.exit_countdown import ExitCountdown
    from nereid.tracing.trace import RequestTrace

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]

KEEP_ALIVE_TIMEOUT_S = 60.0  # idle connections are closed after this long
_MAX_PIPELINED = 16  # parsed but unanswered requests per connection before reading pauses
_WRITEV_FROM = 64 * 1024  # bodies at least this large are written without joining them to the head
_REASONS = {status.value: status.phrase.encode() for status in http.HTTPStatus}

# Limits on what a request may send before its body, so that no request makes the server buffer or parse
# without bound (Triton drops the connection, unanswered, at a line over 8 KiB; see docs/http_limits.md).
MAX_URL_BYTES = 64 * 1024  # request target, path and query together: 414 beyond
MAX_HEADER_BYTES = 64 * 1024  # the header section (may be exceeded by up to one socket read): 431 beyond
MAX_HEADER_COUNT = 256  # header lines, repeats included: 431 beyond
# Non-empty chunks of one chunked body, as in Triton: each is a Python call and a piece kept until the
# body is joined, so a body of many tiny chunks would cost far more than its bytes. 400 beyond.
MAX_CHUNKS = 1 << 16
# After a refusal, how long and how much of what the client still sends is read and dropped
_LINGER_S = 1.0
_LINGER_BYTES = 1 << 20
_CHUNK_LINE_TAIL = 256  # bytes kept from the previous read to find a chunk-size line split across reads


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a request may take to arrive, and how many connections are open at once (see
    docs/http_limits.md). A request over a time limit is answered 408 and its connection closed."""

    header_timeout_s: float = 30.0  # from a request's first byte to the end of its header section
    body_timeout_s: float = 30.0  # the window over which a body's rate is measured
    body_min_rate: int = 1024  # bytes per second a body must average over each window
    max_connections: int = field(default_factory=default_max_connections)  # beyond: wait to be accepted


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # names lower-cased; repeated headers joined with ", "
    body: bytes
    # While tracing is on: when the request began to arrive and when it was complete (perf_counter_ns),
    # Triton's HTTP_RECV_START and HTTP_RECV_END; 0 otherwise.
    recv_start: int = 0
    recv_end: int = 0
    # The trace of the request, when the handler sampled it: the connection records HTTP_SEND_START and
    # HTTP_SEND_END around the writing of the response (of each piece of a streamed one, as Triton does
    # for each response of generate_stream), and then closes it.
    trace: RequestTrace | None = None


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: Headers = field(default_factory=list)  # without content-length, which is added on write
    # A body sent piece by piece as it is produced (chunked transfer encoding), instead of `body`. When the
    # client goes away, the iterator is closed, so that what produces it can stop.
    stream: AsyncIterator[bytes] | None = None


class Tracing(Protocol):
    """Whether requests may be traced now (the trace manager's flag): their receive times are taken."""

    active: bool


class DeferredResponse:
    """A response a handler answers later by callback, with no coroutine waiting for it: the HTTP infer
    path of most models, where a coroutine and a Task per request would cost more than the model."""

    __slots__ = ()

    def then(self, callback: Callable[[HttpResponse], None]) -> None:
        """Call `callback` once, on the event loop, with the response (unless cancelled first)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """The client went away: drop the request; `callback` may no longer be called."""
        raise NotImplementedError


# A coroutine (a Task drives it if it waits), or a response now, or one that comes by callback.
Handler = Callable[[HttpRequest], Awaitable[HttpResponse] | HttpResponse | DeferredResponse]
# Answers a request the connection refuses before the handler sees it (bad syntax, too large).
ErrorResponse = Callable[[int, str], HttpResponse]


if sys.version_info >= (3, 12):

    def _start(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None], context: contextvars.Context
    ) -> asyncio.Task[None] | None:
        """Run `coro` as a Task started eagerly: it runs at once, up to its first wait, inside its Task.

        Most requests to small models never wait (the model runs on the event loop): they are answered
        here, without the trip through the loop that `create_task` would cost each of them. Being a Task
        from the start keeps what handlers rely on: `asyncio.timeout` and `wait_for`, `current_task()`,
        cancellation. It runs in `context`. None when it answered already.
        """
        task = asyncio.Task(coro, loop=loop, context=context, eager_start=True)
        return None if task.done() else task

else:  # eager tasks came in 3.12

    def _start(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None], context: contextvars.Context
    ) -> asyncio.Task[None] | None:
        """Run `coro` at once, in `context`, up to its first wait; only a coroutine that does wait needs a
        Task, which then drives the rest of it (cancellation included) in the same context.

        The same saving as an eager Task, whose trip through the loop would cost a request to a small
        model about 7 us here. Until its first wait the coroutine has no current task, which only
        `asyncio.timeout`, TaskGroup and `current_task()` notice (`wait_for` needs no Task before 3.12).
        """
        try:
            waiting_on = context.run(coro.send, None)
        except StopIteration:
            return None
        return context.run(loop.create_task, _carry_on(coro, waiting_on))

    async def _carry_on(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        await _Continuation(coro, waiting_on)

    class _Continuation:
        """Hands a Task the future a started coroutine waits on, then lets the Task drive the rest of it."""

        __slots__ = ("_coro", "_waiting_on")

        def __init__(self, coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
            self._coro = coro
            self._waiting_on = waiting_on

        def __await__(self) -> Generator[Any, None, None]:
            coro, waiting_on = self._coro, self._waiting_on
            while True:
                try:
                    yield waiting_on  # the Task waits for it, as it would have for the coroutine itself
                except BaseException as exc:  # cancellation (or another error) goes into the coroutine
                    try:
                        waiting_on = coro.throw(exc)
                    except StopIteration:
                        return
                    continue
                break
            yield from coro.__await__()  # resumes the coroutine where it waited


class HttpServer:
    """Listens on one address and serves every connection with `handler`."""

    def __init__(
        self,
        handler: Handler,
        error_response: ErrorResponse,
        max_body_size: int,
        keep_alive_timeout_s: float = KEEP_ALIVE_TIMEOUT_S,
        tracing: Tracing | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._keep_alive_timeout_s = keep_alive_timeout_s
        self.limits = limits or ConnectionLimits()
        self._tracing = tracing
        self._handler = handler
        self._error_response = error_response
        self._max_body_size = max_body_size
        self._heads = HeadCache()  # per server: what a head allows depends on its limits
        self._connections: set[_Connection] = set()
        self._listener: Listener | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._all_closed: asyncio.Future[None] | None = None  # while stopping: set once no connection is left

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        """Listen on host:port; `reuse_port` lets other processes listen on the same port (the kernel
        spreads connections between them), as Triton's --reuse-http-port."""
        listener = Listener(lambda: _Connection(self), self.limits.max_connections, self._connections.__len__)
        await listener.start(host, port, reuse_port)
        self._listener = listener
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        if self._listener is None:
            raise RuntimeError("the HTTP server is not started")
        return int(self._listener.sockets[0].getsockname()[1])

    async def stop(self, timeout_s: float, countdown: ExitCountdown | None = None) -> None:
        """Stop accepting, let requests in flight finish for up to `timeout_s`, then close everything.
        With a `countdown` (the inference endpoint, as Triton's), open connections first go on serving
        until their clients close them or the countdown is over, which is said once a second."""
        deadline = time.monotonic() + timeout_s
        if self._listener is not None:
            self._listener.close()
        if countdown is not None:
            await self._wait_for_clients(countdown)
        if self._sweeper is not None:
            self._sweeper.cancel()
        # Requests that already reached the server's sockets are read and answered (with connection:
        # close) rather than reset: the loop takes one more look at every socket before idle ones close.
        for connection in self._connections:
            connection.closing = True
        for _ in range(2):
            await asyncio.sleep(0)
        for connection in list(self._connections):
            connection.close_when_idle()
        while self._connections and time.monotonic() < deadline:
            busy = [c.wait_idle() for c in self._connections if c.busy]
            if not busy:
                break
            await asyncio.wait(busy, timeout=deadline - time.monotonic())
        # Out of time: what still runs is answered with an error, so that its client knows.
        late = self._error_response(
            503, f"the server is stopping and this request did not finish in {timeout_s:g} s"
        )
        for connection in list(self._connections):
            connection.fail_in_flight(late)

    async def _wait_for_clients(self, countdown: ExitCountdown, period_s: float = 1.0) -> None:
        """Until every client has closed its connection or the countdown is over. Requests keep coming
        on open connections and are answered as usual (kept alive); idle ones still close after the
        keep-alive timeout."""
        while self._connections and countdown.left > 0:
            countdown.report(f"Found {len(self._connections)} HTTP service connections")
            self._all_closed = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._all_closed], timeout=period_s)
        self._all_closed = None

    def _forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        if self._listener is not None:
            self._listener.connection_closed()
        if not self._connections and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)

    async def _sweep(self) -> None:
        """Close idle connections, and refuse requests whose head or body arrives too slowly."""
        limits = self.limits
        period = min(self._keep_alive_timeout_s, limits.header_timeout_s, limits.body_timeout_s) / 4
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            cutoff = now - self._keep_alive_timeout_s
            for connection in list(self._connections):
                if not connection.busy and connection.last_active < cutoff and not connection.receiving:
                    connection.close_when_idle()
                else:
                    connection.check_progress(now, limits)


# Header names as read (any case) to their lower-case text: clients send the same few names on every
# request, so each is decoded and lowered once.
_HEADER_KEYS: dict[bytes, str] = {}
_MAX_HEADER_KEYS = 1024


def _header_key(name: bytes) -> str:
    if len(_HEADER_KEYS) >= _MAX_HEADER_KEYS:  # names that vary without end
        _HEADER_KEYS.clear()
    key = _HEADER_KEYS[name] = name.decode("latin-1").lower()
    return key


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        # Each request's Task starts from the connection's context, not from the request before it.
        self._context = contextvars.copy_context()
        self._parser = httptools.HttpRequestParser(self)
        # A request with both Content-Length and chunked Transfer-Encoding is read by its chunks, as
        # RFC 9112 (6.3) allows, instead of refused; the connection ends after its answer (see _last).
        self._parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self._transport: asyncio.Transport | None = None
        # parsed requests waiting their turn, or the refusal that ends the connection after them
        self._pending: deque[tuple[HttpRequest | HttpResponse, bool]] = deque()
        self._busy = False
        self._answering = False
        self._task: asyncio.Task[None] | None = None  # the request in flight, to cancel if the client leaves
        self._deferred: DeferredResponse | None = None  # or the response it waits for, to cancel likewise
        self._deferred_trace: RequestTrace | None = None  # and that response's trace, if it is traced
        self._reading_paused = False
        self._writing_paused = False
        self.closing = False
        self.last_active = time.monotonic()
        self._idle_waiter: asyncio.Future[None] | None = None  # for stop(): set when nothing is in flight
        self._drain_waiter: asyncio.Future[None] | None = None  # a streamed body waits for the client
        # the request being parsed
        self._url: list[bytes] = []
        self._url_size = 0
        self._headers: dict[str, str] = {}
        # repeated headers, joined once the header section is complete: linear, not quadratic
        self._repeated: dict[str, list[str]] = {}
        self._header_count = 0
        self._in_head = False  # between the start of a request and the end of its headers
        self._head_size = 0
        self._head_started = 0.0  # when the read that began the request arrived (monotonic)
        self._in_body = False  # between the end of a request's headers and the end of its body
        # How much of the body had arrived when its rate was last measured, and when (monotonic).
        self._body_mark = 0
        self._body_mark_time = 0.0
        self._chunk_header = False  # a chunk-size line was read in this read and its chunk is not complete
        self._chunk_read = 0  # and the bytes of that chunk that came after it in this read
        self._tail = b""  # the end of the previous read, for a chunk-size line split across reads
        self._body: list[bytes] = []
        self._body_size = 0
        self._chunks = 0  # non-empty chunks of the body being read
        self._new_chunk = False  # a chunk-size line was read and its first data is still to come
        self._tracing = server._tracing
        self._recv_start = 0
        self._refused = False
        self._dropped = 0  # bytes read and dropped after a refusal
        # A request was framed two ways (Content-Length and chunked): it is answered, and nothing sent
        # after it on this connection is, since a peer on the way may have framed it the other way.
        self._last = False
        # Where the head cache may take over: httptools holds no part of a message, and the last one kept
        # the connection alive.
        self._between_messages = True
        self._known: Head | None = None  # a known head whose body is still arriving
        # The bytes of the head that starts this read, when not known: the key under which httptools'
        # reading of it is kept if it turns out plain (_head_key, for the message it begins).
        self._candidate: bytes | None = None
        self._head_key: bytes | None = None

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def receiving(self) -> bool:
        """Whether part of a request has arrived and the rest has not."""
        return self._in_head or self._in_body or self._known is not None

    def check_progress(self, now: float, limits: ConnectionLimits) -> None:
        """Answer 408 to a request whose head has taken too long to arrive, or whose body arrives slower
        than the limits allow (while the server reads it: not while reading waits for the client to take
        its responses, or for requests before it)."""
        if self._refused or self._reading_paused or self._transport is None:
            return
        if self._in_head:
            if now - self._head_started > limits.header_timeout_s:
                self._refuse(
                    408, f"request header section did not arrive within {limits.header_timeout_s:g} s"
                )
        elif self._in_body or self._known is not None:
            elapsed = now - self._body_mark_time
            if elapsed < limits.body_timeout_s:
                return
            received = self._body_size - self._body_mark
            if received == 0 or received < limits.body_min_rate * elapsed:
                self._refuse(
                    408,
                    f"request body arrived slower than {limits.body_min_rate} bytes/s over "
                    f"{limits.body_timeout_s:g} s",
                )
            else:
                self._body_mark, self._body_mark_time = self._body_size, now

    def wait_idle(self) -> asyncio.Future[None]:
        """Done once the request in flight (and those pipelined behind it) are answered."""
        if self._idle_waiter is None or self._idle_waiter.done():
            self._idle_waiter = self._loop.create_future()
            if not self._busy:
                self._idle_waiter.set_result(None)
        return self._idle_waiter

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._forget(self)
        self._pending.clear()
        self._transport = None
        # The parser holds this connection's callbacks, so the two form a cycle that only the cyclic
        # collector frees, and the server lets that run rarely (heap.py): the cycle would keep a request's
        # body (up to --http-max-input-size) alive long after its connection closed. Drop the body and
        # break the cycle, so the connection goes when the last reference to it does.
        self._body = []
        self._url = []
        self._tail = b""
        self._known = None
        del self._parser
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        if self._task is not None:
            # The client is gone: cancelling drops the request from its model's queue.
            self._task.cancel()
        elif self._deferred is not None:
            self._drop_deferred()

    def data_received(self, data: bytes) -> None:
        if self._last:
            return  # the connection ends with the answer to a request framed two ways
        if self._refused:
            self._dropped += len(data)
            if self._dropped > _LINGER_BYTES:
                self._close()
            return
        self.last_active = time.monotonic()
        if self._between_messages:
            data = self._serve_known(data)
            if not data:
                return
        was_in_head = self._in_head
        self._chunk_header = False
        self._chunk_read = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # No protocol upgrades here: the request is served as plain HTTP/1.1, and what follows it is
            # left to httptools.
            self._between_messages = False
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
        self._candidate = None
        if self._refused:
            return
        # httptools buffers a header until its end, so its size is bounded here, read by read: a read that
        # holds the head from start to end cannot exceed the limit by more than its own size.
        if was_in_head and self._in_head:
            self._head_size += len(data)
            if self._head_size > MAX_HEADER_BYTES:
                self._refuse(431, f"request header section is larger than {MAX_HEADER_BYTES} bytes")
                return
        if self._chunk_header:
            # A chunk-size line came in this read and its chunk is still arriving: refuse a chunk that
            # cannot fit at once, rather than wait for data the limit would refuse anyway. The chunk's
            # data in this read is its last `_chunk_read` bytes, so the size line ends just before them.
            end = len(data) - self._chunk_read
            self._check_chunk_size(self._tail + data[max(0, end - _CHUNK_LINE_TAIL) : end])
        self._tail = data[-_CHUNK_LINE_TAIL:]

    def _serve_known(self, data: bytes) -> bytes:
        """Serve the requests at the start of `data` whose heads are known (see heads.py), collecting the
        body of the last one when it is still to come; what is left, from the first unknown head on, is
        for httptools."""
        size = len(data)
        start = 0
        known = self._known
        if known is not None:  # the rest of a body
            need = known.length - self._body_size
            if size < need:
                self._body.append(data)
                self._body_size += size
                return b""
            self._known = None
            body, self._body = self._body, []  # the request holds the body; its pieces are not kept
            if body:
                body.append(data if need == size else data[:need])
                self._serve_head(known, b"".join(body))
            else:
                self._serve_head(known, data if need == size else data[:need])
            start = need
        heads = self._server._heads
        while start < size:
            end = data.find(HEAD_END, start, start + MAX_HEAD_BYTES)
            if end < 0:
                break
            end += 4
            key = data[start:end]
            known = heads.get(key)
            if known is None:
                self._candidate = key
                break
            tracing = self._tracing
            self._recv_start = time.perf_counter_ns() if tracing is not None and tracing.active else 0
            stop = end + known.length
            if stop > size:  # the body comes in later reads
                self._known = known
                self._body = [data[end:]] if end < size else []
                self._body_size = size - end
                self._body_mark, self._body_mark_time = self._body_size, self.last_active
                return b""
            self._serve_head(known, data[end:stop])
            start = stop
        return data[start:] if start else data

    def _serve_head(self, head: Head, body: bytes) -> None:
        request = HttpRequest(head.method, head.path, head.query, head.headers.copy(), body)
        if self._recv_start:
            request.recv_start = self._recv_start
            request.recv_end = time.perf_counter_ns()
        self._dispatch(request, True)

    def _refuse_too_large(self, size: int) -> None:
        """Triton's texts: a raw binary body (a zero Inference-Header-Content-Length) or a JSON one."""
        limit = self._server._max_body_size
        if self._headers.get("inference-header-content-length", "").strip() == "0":
            text = f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value of {limit} bytes."
        else:
            text = (
                f"request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} bytes."
            )
        self._refuse(400, text + " Use --http-max-input-size to increase the limit.")

    def _check_chunk_size(self, seen: bytes) -> None:
        line = seen.rstrip(b"\r\n").rpartition(b"\n")[2].partition(b";")[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            return  # not found whole: on_body still counts the data as it comes
        if self._body_size + size > self._server._max_body_size:
            self._refuse_too_large(self._body_size + size)

    def pause_writing(self) -> None:
        # The client is not reading its responses: stop reading its requests until it catches up.
        self._writing_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        if len(self._pending) < _MAX_PIPELINED:
            self._resume_reading()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._between_messages = False
        self._head_key, self._candidate = self._candidate, None  # only the read's first message starts it
        self._url = []
        self._url_size = 0
        self._headers = {}
        self._repeated = {}
        self._header_count = 0
        self._in_head = True
        self._head_started = self.last_active
        self._head_size = 0
        self._body = []
        self._body_size = 0
        self._chunks = 0
        self._new_chunk = False
        tracing = self._tracing
        self._recv_start = time.perf_counter_ns() if tracing is not None and tracing.active else 0

    def on_url(self, url: bytes) -> None:
        if self._refused:
            return
        self._url_size += len(url)
        if self._url_size > MAX_URL_BYTES:
            self._refuse(414, f"request URL is longer than {MAX_URL_BYTES} bytes")
            return
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > MAX_HEADER_COUNT:
            self._refuse(431, f"request has more than {MAX_HEADER_COUNT} header lines")
            return
        key = _HEADER_KEYS.get(name)
        if key is None:
            key = _header_key(name)
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        if previous is None:
            self._headers[key] = text
        elif key in self._repeated:
            self._repeated[key].append(text)
        else:
            self._repeated[key] = [previous, text]

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._refused:
            return
        self._in_body = True
        self._body_mark, self._body_mark_time = 0, self.last_active
        for key, values in self._repeated.items():
            self._headers[key] = ", ".join(values)
        declared = self._headers.get("content-length")
        if declared is not None and "transfer-encoding" in self._headers:
            declared = None  # the chunks frame the body (Content-Length is ignored); see on_message_complete
        if declared is not None and declared.isdigit() and int(declared) > self._server._max_body_size:
            self._refuse_too_large(int(declared))
            return
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._chunk_header:
            self._chunk_read += len(body)
        if self._refused:
            return
        if self._new_chunk:
            self._new_chunk = False
            self._chunks += 1
            if self._chunks > MAX_CHUNKS:
                text = f"Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks."
                self._refuse(400, text + " Send fewer or larger HTTP chunks.")
                return
        self._body_size += len(body)
        if self._body_size > self._server._max_body_size:
            self._refuse_too_large(self._body_size)
            return
        self._body.append(body)

    def on_chunk_header(self) -> None:
        self._chunk_header = True
        self._chunk_read = 0
        self._new_chunk = True  # counted by on_body, so that the last, empty chunk is not

    def on_chunk_complete(self) -> None:
        self._chunk_header = False

    def on_message_complete(self) -> None:
        self._in_body = False
        if self._refused or self._last:
            self._body = []
            return
        url = b"".join(self._url).decode("latin-1")
        path, _, query = url.partition("?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []  # the request holds the body now; its pieces are not kept beside it
        method = self._parser.get_method().decode("latin-1")
        request = HttpRequest(method, path, query, self._headers, body)
        if self._recv_start:
            request.recv_start = self._recv_start
            request.recv_end = time.perf_counter_ns()
        keep_alive = self._parser.should_keep_alive()
        if "transfer-encoding" in self._headers and "content-length" in self._headers:
            keep_alive = False
            self._last = True
        self._between_messages = keep_alive
        key = self._head_key
        if key is not None and plain(
            key, method, self._parser.get_http_version(), self._headers, self._header_count, keep_alive
        ):
            length = int(self._headers.get("content-length", 0))
            self._server._heads.remember(key, Head(method, path, query, dict(self._headers), length))
        self._dispatch(request, keep_alive)

    def _dispatch(self, request: HttpRequest, keep_alive: bool) -> None:
        """Serve a request now, or after those before it."""
        if not self._busy:
            self._serve(request, keep_alive)
        else:
            self._pending.append((request, keep_alive))
            if len(self._pending) >= _MAX_PIPELINED:
                self._pause_reading()

    # serving
    def _serve(self, request: HttpRequest, keep_alive: bool) -> None:
        self._busy = True
        self._answering = False  # set once its response starts to be written
        try:
            reply = self._server._handler(request)
        except Exception:  # the handler answers its own errors; this is a bug, not a client mistake
            log.exception("unexpected error answering %s %s", request.method, request.path)
            reply = self._server._error_response(500, "internal error")
        if type(reply) is HttpResponse and reply.stream is None:
            self._reply(reply, keep_alive, request.trace)
        elif isinstance(reply, DeferredResponse):
            self._deferred = reply
            self._deferred_trace = request.trace
            reply.then(partial(self._deferred_reply, reply, keep_alive))
        else:
            task = _start(self._loop, self._answer(reply, request, keep_alive), self._context.copy())
            if task is not None:  # it waits; otherwise it answered already (and may have started the next)
                self._task = task

    def _deferred_reply(self, deferred: DeferredResponse, keep_alive: bool, response: HttpResponse) -> None:
        if deferred is self._deferred:  # not dropped meanwhile
            self._deferred = None
            trace, self._deferred_trace = self._deferred_trace, None
            self._reply(response, keep_alive, trace)

    def _drop_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.cancel()
            trace, self._deferred_trace = self._deferred_trace, None
            if trace is not None:  # cancelled: the trace is complete
                trace.close()
            self._finish()

    def _reply(self, response: HttpResponse, keep_alive: bool, trace: RequestTrace | None = None) -> None:
        """Write a response that is whole (recording its send times and closing its trace, if traced), then
        go on with the connection."""
        if trace is None:
            self._write(response, keep_alive and not self.closing)
        else:
            start = time.perf_counter_ns()
            self._write(response, keep_alive and not self.closing)
            trace.sent(HTTP_SEND_START, start, HTTP_SEND_END)  # and closes it
        self._finish()
        self._next(keep_alive)

    async def _answer(
        self, reply: Awaitable[HttpResponse] | HttpResponse, request: HttpRequest, keep_alive: bool
    ) -> None:
        try:
            try:
                response = reply if isinstance(reply, HttpResponse) else await reply
            except asyncio.CancelledError:
                self._finish()
                raise
            except Exception:  # the handler answers its own errors; this is a bug, not a client mistake
                log.exception("unexpected error answering %s %s", request.method, request.path)
                response = self._server._error_response(500, "internal error")
            trace = request.trace
            if response.stream is None:
                if trace is not None:
                    trace.now(HTTP_SEND_START)
                self._write(response, keep_alive and not self.closing)
                if trace is not None:
                    trace.now(HTTP_SEND_END)  # handed to the transport, which sends it as the socket allows
            else:
                try:
                    await self._write_stream(response, keep_alive and not self.closing, trace)
                except asyncio.CancelledError:
                    self._finish()
                    raise
        finally:
            if request.trace is not None:  # answered, failed or cancelled: the trace is complete
                request.trace.close()
        self._finish()
        self._next(keep_alive)

    def _next(self, keep_alive: bool) -> None:
        """After a response: close, or serve the next pipelined request."""
        if not keep_alive or self.closing:
            self._close()
        elif self._pending:
            item, next_keep_alive = self._pending.popleft()
            if isinstance(item, HttpResponse):
                self._write_refusal(item)
                return
            if not self._writing_paused:
                self._resume_reading()
            self._serve(item, next_keep_alive)

    def _finish(self) -> None:
        self._busy = False
        self._task = None
        waiter = self._idle_waiter
        if waiter is not None and not self._pending and not waiter.done():
            waiter.set_result(None)

    def _write(self, response: HttpResponse, keep_alive: bool) -> None:
        self._answering = True
        transport = self._transport
        if transport is None:
            return
        body = response.body
        key = (response.status, keep_alive, tuple(response.headers))
        try:
            prefix = _PREFIXES.get(key) or _prefix(key, response, keep_alive)
        except TypeError:  # a header that is not a pair of bytes cannot key the cache
            prefix = _prefix(None, response, keep_alive)
        if len(body) < _WRITEV_FROM:
            transport.write(b"".join((prefix, b"%d\r\n\r\n" % len(body), body)))
        else:
            transport.writelines([b"".join((prefix, b"%d\r\n\r\n" % len(body))), body])

    async def _write_stream(
        self, response: HttpResponse, keep_alive: bool, trace: RequestTrace | None = None
    ) -> None:
        """The head, then each piece as a chunk as soon as it comes; the iterator is closed in any case."""
        stream = response.stream
        assert stream is not None
        try:
            transport = self._transport
            if transport is None:
                return
            lines = _head(response, keep_alive)
            lines.append(b"transfer-encoding: chunked\r\n\r\n")
            self._answering = True
            transport.write(b"".join(lines))
            async for piece in stream:
                transport = self._transport
                if transport is None:
                    return
                if piece:
                    if trace is not None:
                        trace.now(HTTP_SEND_START)
                    transport.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    if trace is not None:
                        trace.now(HTTP_SEND_END)
                if self._writing_paused:
                    self._drain_waiter = self._loop.create_future()
                    await self._drain_waiter
            if self._transport is not None:
                self._transport.write(b"0\r\n\r\n")
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer, after the requests before it, and close: nothing after it on this connection can be trusted."""
        self._refused = True
        self._pause_reading()
        response = self._server._error_response(status, message)
        if self._busy:
            self._pending.append((response, False))
        else:
            self._write_refusal(response)

    def _write_refusal(self, response: HttpResponse) -> None:
        """Answer, close the sending side, and drop what the client still sends for a moment before closing.

        Closing a socket with unread data makes the kernel reset the connection, and a reset can destroy
        the answer before the client reads it; reading on a little lets the client see why it was refused.
        """
        transport = self._transport
        if transport is None:
            return
        self._write(response, keep_alive=False)
        if not transport.can_write_eof():
            self._close()
            return
        transport.write_eof()
        self._resume_reading()  # data_received drops everything once refused
        self._loop.call_later(_LINGER_S, self._close)

    def close_when_idle(self) -> None:
        self.closing = True
        if not self._busy:
            self._close()

    def fail_in_flight(self, response: HttpResponse) -> None:
        """Answer the request in flight with `response` (unless its answer already began), then close."""
        transport, task = self._transport, self._task
        self._pending.clear()
        if transport is not None and self._busy and not self._answering:
            self._write(response, keep_alive=False)
        if task is not None:
            task.cancel()  # drops the request from its model's queue, or stops waiting for its model
        self._drop_deferred()
        self._close()  # after the answer is flushed

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()


# A whole response's head up to its content-length value, by status, headers and whether the connection
# stays open: the same few recur response after response, so each is built once. Bounded, for headers
# whose values vary without end.
_PREFIXES: dict[tuple[int, bool, tuple[tuple[bytes, bytes], ...]], bytes] = {}
_MAX_PREFIXES = 256


def _prefix(
    key: tuple[int, bool, tuple[tuple[bytes, bytes], ...]] | None, response: HttpResponse, keep_alive: bool
) -> bytes:
    """The head before a content-length value, remembered under `key` (None: not remembered)."""
    lines = _head(response, keep_alive)
    lines.append(b"content-length: ")
    prefix = b"".join(lines)
    if key is not None:
        if len(_PREFIXES) >= _MAX_PREFIXES:
            _PREFIXES.clear()
        _PREFIXES[key] = prefix
    return prefix


def _head(response: HttpResponse, keep_alive: bool) -> list[bytes]:
    """The status line and headers, but for the framing header and the blank line."""
    status = response.status
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    for name, value in response.headers:
        lines += (name, b": ", value, b"\r\n")
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    return lines
