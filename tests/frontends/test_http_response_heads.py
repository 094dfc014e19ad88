"""Response heads written from remembered prefixes: byte for byte the head built afresh, whatever the
status, headers, body size and keep-alive; the tables of prefixes and of infer responses' length headers
stay bounded."""

from __future__ import annotations

import asyncio

import pytest

from nereid.frontends.http import app, error_response, protocol
from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer, _Connection

OCTET = (b"content-type", b"application/octet-stream")
JSON = (b"content-type", b"application/json")

RESPONSES = [
    HttpResponse(200, b""),
    HttpResponse(200, b"{}", [JSON]),
    HttpResponse(200, b"x" * 300, [OCTET, (b"inference-header-content-length", b"200")]),
    HttpResponse(200, b"x" * 300, [OCTET, (b"inference-header-content-length", b"201")]),
    HttpResponse(400, b'{"error":"no"}', [JSON]),
    HttpResponse(503, b"", [JSON, (b"retry-after", b"1")]),
    HttpResponse(299, b"odd", [(b"x-a", b"1"), (b"x-a", b"2")]),  # no reason phrase known
    HttpResponse(200, b"y" * (protocol._WRITEV_FROM + 5), [OCTET]),  # written without joining
]


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += bytes(data)

    def writelines(self, data: object) -> None:
        for piece in data:  # type: ignore[attr-defined]
            self.write(piece)


def _fresh(response: HttpResponse, keep_alive: bool) -> bytes:
    """The response as written with its head built line by line."""
    status = response.status
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, protocol._REASONS.get(status, b"Unknown"))]
    lines += [name + b": " + value + b"\r\n" for name, value in response.headers]
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    lines.append(b"content-length: %d\r\n\r\n" % len(response.body))
    return b"".join(lines) + response.body


def _written(response: HttpResponse, keep_alive: bool) -> bytes:
    return asyncio.run(_write(response, keep_alive))


async def _write(response: HttpResponse, keep_alive: bool) -> bytes:
    async def handler(request: HttpRequest) -> HttpResponse:
        raise AssertionError("not called")

    connection = _Connection(HttpServer(handler, error_response, 1 << 20))
    transport = _Transport()
    connection.connection_made(transport)
    connection._write(response, keep_alive)
    return transport.data


@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("response", RESPONSES, ids=range(len(RESPONSES)))
def test_remembered_heads_are_the_heads_built_afresh(response: HttpResponse, keep_alive: bool) -> None:
    protocol._PREFIXES.clear()
    first = _written(response, keep_alive)  # builds and remembers its prefix
    assert first == _fresh(response, keep_alive)
    assert _written(response, keep_alive) == first  # from the remembered prefix


def test_responses_alike_but_for_one_header_value_get_their_own_heads() -> None:
    protocol._PREFIXES.clear()
    for response in RESPONSES * 2:
        for keep_alive in (True, False):
            assert _written(response, keep_alive) == _fresh(response, keep_alive)


def test_a_header_that_cannot_key_the_table_is_written_all_the_same() -> None:
    response = HttpResponse(200, b"{}", [[b"content-type", b"application/json"]])  # type: ignore[list-item]
    assert _written(response, True) == _fresh(response, True)


def test_the_table_is_bounded_when_header_values_keep_changing() -> None:
    protocol._PREFIXES.clear()
    for length in range(3 * protocol._MAX_PREFIXES):
        response = HttpResponse(200, b"z", [OCTET, (b"inference-header-content-length", b"%d" % length)])
        assert _written(response, True) == _fresh(response, True)
        assert len(protocol._PREFIXES) <= protocol._MAX_PREFIXES


def test_infer_responses_name_their_json_length_and_each_has_headers_of_its_own() -> None:
    app._HEADER_LENGTHS.clear()
    for json_length in [0, 7, 7, 123456, *range(2 * app._MAX_HEADER_LENGTHS)]:
        response = app._infer_response(b"x" * 10, json_length)
        assert response.headers == [
            (b"content-type", b"application/octet-stream"),
            (b"inference-header-content-length", str(json_length).encode()),
        ]
        response.headers.append((b"content-encoding", b"gzip"))  # as compression does, to this one only
        assert len(app._HEADER_LENGTHS) <= app._MAX_HEADER_LENGTHS
    assert app._infer_response(b"{}", None).headers == [(b"content-type", b"application/json")]
    assert app._infer_response(b"x" * 10, 7).headers[2:] == []
