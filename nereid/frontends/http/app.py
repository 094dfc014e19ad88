"""A raw ASGI application for Triton's HTTP/REST API: routing, bodies, headers, status codes."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from nereid.datatypes import element_size
from nereid.engine import Engine
from nereid.errors import InvalidArgument, NereidError, Status
from nereid.frontends.http.codec import (
    decode_infer_request,
    decode_raw_binary_request,
    encode_infer_response,
    error_body,
)
from nereid.frontends.http.compression import choose_encoding, compress, decompress
from nereid.repository import ModelVersion
from nereid.request_checks import request_prefix
from nereid.settings import ServerSettings

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

HTTP_STATUS = {
    Status.INTERNAL: 500,
    Status.NOT_FOUND: 404,
    Status.UNAVAILABLE: 503,
    Status.UNSUPPORTED: 501,
}

_JSON = (b"content-type", b"application/json")
_OCTET = (b"content-type", b"application/octet-stream")
_TEXT = (b"content-type", b"text/plain")
_MODEL_ROUTE = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats))?")
_LATER = re.compile(
    r"/v2/(?:models/stats|repository(?:/[^/]+)?/(?:index|models/[^/]+/(?:load|unload))|trace/setting|logging"
    r"|models/[^/]+/trace/setting|(?:system|cuda)sharedmemory(?:/region/[^/]+)?/(?:status|register|unregister))"
)


class _Response:
    __slots__ = ("status", "body", "headers", "compressible")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        headers: list[tuple[bytes, bytes]] | None = None,
        compressible: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers if headers is not None else [_JSON]
        self.compressible = compressible


def _json(status: int, value: Any) -> _Response:
    return _Response(status, orjson.dumps(value))


def _error(exc: NereidError) -> _Response:
    return _Response(HTTP_STATUS.get(exc.status, 400), error_body(exc.message))


class HttpFrontend:
    def __init__(self, engine: Engine, settings: ServerSettings) -> None:
        self._engine = engine
        self._max_input = settings.http_max_input_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the server runs uvicorn with lifespan off
            return
        headers = _headers(scope)
        try:
            response = await self._route(scope["method"], scope["path"], headers, receive)
        except _MethodNotAllowed:
            response = _Response(405, error_body("Method Not Allowed"))
        except NereidError as exc:
            response = _error(exc)
        except Exception as exc:  # answered as INTERNAL, logged once with its traceback
            log.exception("unexpected error serving %s %s", scope["method"], scope["path"])
            response = _Response(500, error_body(f"internal error: {type(exc).__name__}: {exc}"))
        body = response.body
        out_headers = response.headers
        accept = headers.get("accept-encoding")
        # Triton compresses infer responses only; clients read other bodies as plain JSON.
        if accept and response.compressible:
            encoding = choose_encoding(accept)
            if encoding != "identity":
                body = compress(body, encoding)
                out_headers = [*out_headers, (b"content-encoding", encoding.encode())]
        out_headers = [*out_headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": response.status, "headers": out_headers})
        await send({"type": "http.response.body", "body": body})

    async def _route(self, method: str, path: str, headers: dict[str, str], receive: Receive) -> _Response:
        engine = self._engine
        if path.startswith("/v2/models/") and path != "/v2/models/stats":
            match = _MODEL_ROUTE.fullmatch(path)
            if match is not None:
                name, version, action = match.group(1), match.group(2) or "", match.group(3)
                if action == "infer":
                    _allow(method, "POST")
                    return await self._infer(name, version, headers, receive)
                if action is None:
                    _allow(method, "GET")
                    return _json(200, engine.model_metadata(name, version))
                if action == "ready":
                    _allow(method, "GET")
                    if engine.model_ready(name, version):
                        return _Response(200, b"", [_TEXT])
                    return _Response(400, error_body("Model version not ready"), [_TEXT])
                if action == "config":
                    _allow(method, "GET")
                    return _json(200, engine.model_config(name, version))
        if path == "/v2/health/live":
            _allow(method, "GET")
            return _Response(200 if engine.is_live() else 400, b"", [_TEXT])
        if path == "/v2/health/ready":
            _allow(method, "GET")
            return _Response(200 if engine.is_ready() else 400, b"", [_TEXT])
        if path == "/v2":
            _allow(method, "GET")
            return _json(200, engine.server_metadata())
        if _LATER.fullmatch(path) or _MODEL_ROUTE.fullmatch(path):
            return _Response(
                501, error_body(f"'{path}' belongs to an extension this server does not implement yet")
            )
        return _Response(404, error_body("Not Found"), [_TEXT])

    async def _infer(self, name: str, version: str, headers: dict[str, str], receive: Receive) -> _Response:
        body = await self._read_body(headers, receive)
        header_value = headers.get("inference-header-content-length")
        header_length = _parse_header_length(header_value) if header_value is not None else None
        if header_length == 0:
            model = self._engine.models.get(name, version)
            request = decode_raw_binary_request(body, name, version, *_raw_input(model, len(body)))
        else:
            request = decode_infer_request(body, header_length, name, version)
        response = await self._engine.infer(request)
        payload, json_length = encode_infer_response(response, request)
        if json_length is None:
            return _Response(200, payload, compressible=True)
        headers_out = [_OCTET, (b"inference-header-content-length", str(json_length).encode())]
        return _Response(200, payload, headers_out, compressible=True)

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes:
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_input:
            raise InvalidArgument(
                f"request body of {declared} bytes is larger than --http-max-input-size ({self._max_input})"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise InvalidArgument("the client disconnected before sending the whole request body")
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self._max_input:
                    raise InvalidArgument(
                        f"request body is larger than --http-max-input-size ({self._max_input} bytes)"
                    )
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        encoding = headers.get("content-encoding")
        if encoding:
            body = decompress(body, encoding, self._max_input)
        return body


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise _MethodNotAllowed()


class _MethodNotAllowed(Exception):
    """Answered 405, as Triton does for a known route with the wrong method."""


def _parse_header_length(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgument(f"Inference-Header-Content-Length must be an integer, got '{value}'") from None


def _raw_input(model: ModelVersion, body_size: int) -> tuple[str, str, tuple[int, ...]]:
    """Name, datatype and batch-1 shape of the single input that a header-less body carries."""
    prefix = request_prefix("")
    if len(model.inputs) != 1:
        raise InvalidArgument(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got {len(model.inputs)} "
            f"inputs in '{model.name}' model configuration"
        )
    spec = next(iter(model.inputs.values()))
    dims = list(spec.dims)
    if spec.datatype == "BYTES":
        if dims != [1]:
            raise InvalidArgument(
                f"{prefix}For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
    elif -1 in dims:
        # deduce the one variable dimension from the body size
        known = element_size(spec.datatype) * math.prod(d for d in dims if d != -1)
        if dims.count(-1) > 1 or body_size % known:
            raise InvalidArgument(
                f"{prefix}raw input '{spec.name}' of model '{model.name}' has dims {dims}: a body of "
                f"{body_size} bytes does not determine its shape"
            )
        dims[dims.index(-1)] = body_size // known
    shape = ((1,) if model.max_batch_size > 0 else ()) + tuple(dims)
    return spec.name, spec.datatype, shape


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
