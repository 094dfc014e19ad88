"""Serving a request whose head is byte for byte one parsed before, without parsing it again.

A load generator or an HTTP client library sends the same request head again and again on a kept-alive
connection (perf_analyzer's libcurl: the same request line and headers, body after body), and parsing
it costs a dozen calls from the parser into Python per request. Here what the parser made of a head
(method, target, headers, body length) is kept under the head's bytes: the request line through the
blank line that ends the header section.

Soundness: a head is kept only after the parser read it, from a message boundary, as a *plain* request
(see `plain`): HTTP/1.0 or 1.1, kept alive, its body framed by Content-Length alone (or absent), nothing
the connection must act on before the body (Expect) or instead of HTTP (Upgrade, CONNECT), and its bytes
exactly the lines the parser reported (its request line first, no bare CR or LF, no folded lines), so
that the key starts where the parser's request started and ends where its header section ended. The parser reads the same bytes from a boundary the same way every time,
so the next request that starts with them is the same request but for its body, which is the
Content-Length bytes after the head, as the parser would frame it. Limits that a head can exceed (URL,
header section, header count, body size) were checked when it was read and depend only on its bytes and
the server, which owns the table. Every request gets a fresh copy of the headers.
"""

from __future__ import annotations

from dataclasses import dataclass

# Heads kept at most, per server; past that the table starts again (heads that differ in a header
# that changes with every request, say).
MAX_HEADS = 256
# Longer heads are left to the parser: they are rare, and the table stays small.
MAX_HEAD_BYTES = 8 * 1024
HEAD_END = b"\r\n\r\n"  # what ends a head
_VERSIONS = frozenset(("1.0", "1.1"))
# Headers that make a request more than its head and its Content-Length body.
_NOT_PLAIN = ("transfer-encoding", "expect", "upgrade")


@dataclass(frozen=True, slots=True)
class Head:
    """What the parser made of a plain request head."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # never handed out: each request gets a copy
    length: int  # of the body


def plain(
    key: bytes, method: str, version: str, headers: dict[str, str], header_count: int, keep_alive: bool
) -> bool:
    """Whether a request the parser read whole and accepted, whose head came as `key`, may be served
    from its head's bytes next time (see the module's note)."""
    if (
        not keep_alive
        or version not in _VERSIONS
        or method == "CONNECT"
        or len(key) > MAX_HEAD_BYTES
        or any(name in headers for name in _NOT_PLAIN)
        or "upgrade" in headers.get("connection", "").lower()
    ):
        return False
    length = headers.get("content-length", "0")
    if not (length.isascii() and length.isdigit()):
        return False  # repeated, or not a plain number
    lines = key.count(b"\r\n")
    # the request line (this request's: not blank lines before it), one line per header, the blank line
    return (
        key.startswith(method.encode("latin-1") + b" ")
        and lines == header_count + 2
        and key.count(b"\n") == lines
        and key.count(b"\r") == lines
    )


class HeadCache:
    """Plain request heads read recently, by their bytes."""

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[bytes, Head] = {}

    def get(self, key: bytes) -> Head | None:
        return self._heads.get(key)

    def remember(self, key: bytes, head: Head) -> None:
        heads = self._heads
        if len(heads) >= MAX_HEADS:
            heads.clear()
        heads[key] = head

    def __len__(self) -> int:
        return len(self._heads)
