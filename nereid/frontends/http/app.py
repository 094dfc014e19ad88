"""Triton's HTTP/REST API: routing, bodies, headers, status codes."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from nereid.datatypes import element_size
from nereid.engine_client import EngineClient, ModelMetadata, QueuedInfer
from nereid.errors import (
    DecoupledModel,
    Forbidden,
    InternalError,
    InvalidArgument,
    NereidError,
    Status,
    request_prefix,
    unexpected,
)
from nereid.frontends import console
from nereid.frontends.header_forward import header_forwarding
from nereid.frontends.http import json_body
from nereid.frontends.http.codec import (
    decode_infer_request,
    decode_raw_binary_request,
    encode_infer_response,
    error_body,
)
from nereid.frontends.http.compression import choose_encoding, compress, decompress
from nereid.frontends.http.documents import (
    cuda_regions_json,
    model_metadata_json,
    repository_index_json,
    server_metadata_json,
    system_regions_json,
)
from nereid.frontends.http.generate import event_stream, generate, wants_events
from nereid.frontends.http.generate import generate_request as decode_generate_request
from nereid.frontends.http.large_bodies import OFF_LOOP_FROM, LargeBodyDecoder
from nereid.frontends.http.protocol import DeferredResponse, HttpRequest, HttpResponse
from nereid.frontends.http.repository import (
    decode_cuda_register,
    decode_index_request,
    decode_load_request,
    decode_system_register,
    decode_unload_request,
)
from nereid.settings import ServerSettings
from nereid.tracing.trace import HTTP_RECV_END, HTTP_RECV_START, RequestTrace
from nereid.tracing.updates import http_update
from nereid.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

HTTP_STATUS = {
    Status.INTERNAL: 500,
    Status.NOT_FOUND: 404,
    Status.UNAVAILABLE: 503,
    Status.UNSUPPORTED: 501,
    Status.PERMISSION_DENIED: 403,
}

_JSON = (b"content-type", b"application/json")
_OCTET = (b"content-type", b"application/octet-stream")
_TEXT = (b"content-type", b"text/plain")
_MODEL_ROUTE = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats|generate|generate_stream))?"
)
# Infer paths whose model name and version `dispatch` keeps at most; past that the table starts again.
MAX_INFER_ROUTES = 256
_REPOSITORY_ROUTE = re.compile(r"/v2/repository(?:/[^/]+)?/(?:(index)|models/([^/]+)/(load|unload))")
_SHARED_MEMORY_ROUTE = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)
_TRACE_ROUTE = re.compile(r"/v2(?:/models/([^/]+))?/trace/setting")
_GROUP_BY_ACTION = {
    None: "metadata",
    "infer": "inference",
    "ready": "health",
    "config": "model-config",
    "stats": "statistics",
    "generate": "inference",
    "generate_stream": "inference",
}


# Another API served on this port: the paths under its prefix (with the slash: "/v1/") go to its handler,
# which answers every one of them (its own 404, 405 and restricted-API answers).
Mount = tuple[str, Callable[[HttpRequest], Awaitable[HttpResponse]]]


def _json(status: int, value: Any) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(value), [_JSON])


def _text(status: int, body: bytes = b"") -> HttpResponse:
    return HttpResponse(status, body, [_TEXT])


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, error_body(message), [_JSON])


class HttpFrontend:
    """Triton's HTTP/REST API: routes a request to the engine and turns the result into a response."""

    def __init__(self, engine: EngineClient, settings: ServerSettings, mounts: Sequence[Mount] = ()) -> None:
        self._engine = engine
        self._max_input = settings.http_max_input_size
        self._restricted = {group: rule for rule in settings.http_restricted_api for group in rule.groups}
        self._console = console.Console(engine, settings) if settings.allow_console else None
        self._mounts = tuple(mounts)
        self._large_bodies = LargeBodyDecoder()
        self._forwarding = header_forwarding(settings.http_header_forward_pattern)
        self._tracer = engine.tracer
        self._infer_routes: dict[str, tuple[str, str]] = {}  # infer path: model name and version
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose: one line per request, at no cost otherwise
            self.handle = self._handle_and_log  # type: ignore[method-assign]
            self.dispatch = self._handle_and_log  # type: ignore[method-assign]

    async def _handle_and_log(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = await HttpFrontend.handle(self, request)
        log.debug(
            "HTTP %s %s -> %d (%d bytes in, %d out, %.1f ms)",
            request.method,
            request.path,
            response.status,
            len(request.body),
            len(response.body),
            (time.perf_counter() - started) * 1000,
        )
        return response

    def close(self) -> None:
        self._large_bodies.close()

    def dispatch(self, request: HttpRequest) -> Awaitable[HttpResponse] | HttpResponse | DeferredResponse:
        """What the HTTP server calls: `handle`, except that an infer request to a model is answered
        by callback (a DeferredResponse) where nothing on its way needs a coroutine."""
        if request.method == "POST" and not self._restricted:
            path = request.path
            if path.endswith("/infer") and path.startswith("/v2/models/"):
                # a client sends its infer requests to one path again and again: matched once
                route = self._infer_routes.get(path)
                if route is None:
                    match = _MODEL_ROUTE.fullmatch(path)
                    if match is None or match.group(3) != "infer":
                        return self.handle(request)
                    if len(self._infer_routes) >= MAX_INFER_ROUTES:
                        self._infer_routes.clear()
                    route = self._infer_routes[path] = (match.group(1), match.group(2) or "")
                return self._infer_now(route[0], route[1], request)
        return self.handle(request)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        try:
            if self._restricted:
                self._check_restricted(request)
            response, compressible = await self._route(request)
        except Exception as exc:
            return _error_reply(exc, request)
        # Triton compresses infer responses only; clients read other bodies as plain JSON.
        if compressible:
            accept = request.headers.get("accept-encoding")
            if accept:
                encoding = choose_encoding(accept)
                if encoding != "identity":
                    response.body = compress(response.body, encoding)
                    response.headers.append((b"content-encoding", encoding.encode()))
        return response

    async def _route(self, request: HttpRequest) -> tuple[HttpResponse, bool]:
        """The response, and whether it may be compressed."""
        engine = self._engine
        method, path = request.method, request.path
        if path == "/v2/models/stats":
            _allow(method, "GET")
            return _json(200, engine.statistics()), False
        if path.startswith("/v2/models/"):
            match = _MODEL_ROUTE.fullmatch(path)
            if match is not None:
                name, version, action = match.group(1), match.group(2) or "", match.group(3)
                if action == "infer":
                    _allow(method, "POST")
                    return await self._infer(name, version, request), True
                if action == "generate" or action == "generate_stream":
                    _allow(method, "POST")
                    generate_request = decode_generate_request(engine, name, version, request.body)
                    if request.recv_start:  # tracing is on
                        generate_request.trace = self._sample(name, request)
                    if action == "generate":
                        return await generate(engine, generate_request), False
                    return await event_stream(engine, generate_request, flat=True), False
                if action is None:
                    _allow(method, "GET")
                    return _json(200, model_metadata_json(engine.model_metadata(name, version))), False
                if action == "ready":
                    _allow(method, "GET")
                    if await engine.model_ready(name, version):
                        return _text(200), False
                    return _text(400, error_body("Model version not ready")), False
                if action == "config":
                    _allow(method, "GET")
                    return _json(200, engine.model_config(name, version)), False
                if action == "stats":
                    _allow(method, "GET")
                    return _json(200, engine.statistics(name, version)), False
        if path == "/v2/health/live":
            _allow(method, "GET")
            return _text(200 if engine.is_live() else 400), False
        if path == "/v2/health/ready":
            _allow(method, "GET")
            return _text(200 if engine.is_ready() else 400), False
        if path == "/v2":
            _allow(method, "GET")
            return _json(200, server_metadata_json(engine.server_metadata())), False
        if path.startswith("/v2/repository"):
            match = _REPOSITORY_ROUTE.fullmatch(path)
            if match is not None:
                _allow(method, "POST")
                return await self._repository(
                    match.group(1), match.group(2), match.group(3), request.body
                ), False
        if "sharedmemory" in path:
            match = _SHARED_MEMORY_ROUTE.fullmatch(path)
            if match is not None:
                kind, region, action = match.groups()
                _allow(method, "GET" if action == "status" else "POST")
                return self._shared_memory(kind, region, action, request.body), False
        if path == "/v2/logging":
            return self._logging(method, request.body), False
        if path.endswith("/trace/setting"):
            match = _TRACE_ROUTE.fullmatch(path)
            if match is not None:
                return self._trace_setting(match.group(1) or "", method, request.body), False
        if self._console is not None and (path == console.PREFIX or path.startswith(console.PREFIX + "/")):
            return self._console.handle(request), False
        for prefix, mounted in self._mounts:
            if path.startswith(prefix):
                return await mounted(request), False
        if _MODEL_ROUTE.fullmatch(path):
            message = f"'{path}' belongs to an extension this server does not implement yet"
            return error_response(501, message), False
        return _text(404, error_body("Not Found")), False

    async def _repository(
        self, index: str | None, name: str | None, action: str | None, body: bytes
    ) -> HttpResponse:
        if index:
            return _json(
                200, repository_index_json(self._engine.repository_index(decode_index_request(body)))
            )
        assert name is not None  # the route matched either index or a model action
        if action == "load":
            config, files = decode_load_request(body, name)
            await self._engine.load_model(name, config, files)
        else:
            await self._engine.unload_model(name, decode_unload_request(body))
        return HttpResponse(200, b"", [_JSON])

    def _logging(self, method: str, body: bytes) -> HttpResponse:
        """The logging extension: GET reads the log settings, POST changes the ones it names."""
        if method == "GET":
            return _json(200, self._engine.log_settings().as_dict())
        _allow(method, "POST")
        try:
            document = json_body.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
        values = document if isinstance(document, dict) else {}  # Triton reads no setting from a non-object
        return _json(200, self._engine.update_log_settings(values).as_dict())

    def _trace_setting(self, model_name: str, method: str, body: bytes) -> HttpResponse:
        if method not in ("GET", "POST"):
            raise _MethodNotAllowed()
        answer = self._engine.trace_setting(model_name)  # an unknown model is refused before the body is read
        if method == "POST":
            answer = self._engine.trace_setting(model_name, http_update(body))
        # Written pair by pair: a setting given more than once (opentelemetry `resource`) is listed as
        # many times, as in Triton's answer.
        body = (
            b"{" + b",".join(orjson.dumps(key) + b":" + orjson.dumps(value) for key, value in answer) + b"}"
        )
        return HttpResponse(200, body, [_JSON])

    def _shared_memory(self, kind: str, region: str | None, action: str, body: bytes) -> HttpResponse:
        engine = self._engine
        system = kind == "system"
        if action == "status":
            if system:
                return _json(200, system_regions_json(engine.system_shared_memory_status(region)))
            return _json(200, cuda_regions_json(engine.cuda_shared_memory_status(region)))
        if action == "unregister":
            if system:
                engine.unregister_system_shared_memory(region)
            else:
                engine.unregister_cuda_shared_memory(region)
            return HttpResponse(200, b"", [_JSON])
        if region is None:  # register needs a region name in the path
            return _text(404, error_body("Not Found"))
        if system:
            engine.register_system_shared_memory(region, *decode_system_register(body))
        else:
            engine.register_cuda_shared_memory(region, *decode_cuda_register(body))
        return HttpResponse(200, b"", [_JSON])

    def _check_restricted(self, request: HttpRequest) -> None:
        group = _api_group(request.path)
        rule = self._restricted.get(group) if group else None
        if rule is not None and request.headers.get(rule.header) != rule.value:
            raise Forbidden(f"This API is restricted, expecting header '{rule.header}'")

    async def _infer(self, name: str, version: str, request: HttpRequest) -> HttpResponse:
        headers = request.headers
        body = request.body
        encoding = headers.get("content-encoding")
        if encoding:
            body = decompress(body, encoding, self._max_input)
        header_value = headers.get("inference-header-content-length")
        header_length = _parse_header_length(header_value) if header_value is not None else None
        if header_length == 0:
            metadata = self._engine.model_metadata(name, version)
            infer_request = decode_raw_binary_request(body, name, version, *_raw_input(metadata, len(body)))
        elif len(body) >= OFF_LOOP_FROM and (header_length is None or header_length >= OFF_LOOP_FROM):
            infer_request = await self._large_bodies.decode(body, header_length, name, version)
        else:
            infer_request = decode_infer_request(body, header_length, name, version)
        if self._forwarding is not None:
            self._forwarding.add_parameters(headers.items(), infer_request.parameters)
        trace = None
        if request.recv_start:  # tracing is on
            trace = infer_request.trace = self._sample(name, request)
        return await self._run_infer(infer_request, headers, trace)

    async def _run_infer(
        self, infer_request: InferRequest, headers: dict[str, str], trace: RequestTrace | None
    ) -> HttpResponse:
        try:
            response = await self._engine.infer(infer_request)
        except DecoupledModel:
            if wants_events(headers.get("accept")):  # beyond Triton: the responses as a stream
                return await event_stream(self._engine, infer_request, flat=False)
            raise DecoupledModel("HTTP end point") from None
        if trace is not None:
            trace.complete = time.perf_counter_ns()  # INFER_RESPONSE_COMPLETE, recorded with the send times
        payload, json_length = encode_infer_response(response, infer_request)
        return _infer_response(payload, json_length)

    def _sample(self, name: str, request: HttpRequest) -> RequestTrace | None:
        """The trace of an inference request, when it is sampled; the connection took its receive times,
        and records its send times and closes it once the response is written."""
        trace = request.trace = self._tracer.sample(
            name, request.headers, (HTTP_RECV_START, request.recv_start, HTTP_RECV_END, request.recv_end)
        )
        return trace

    def _infer_now(
        self, name: str, version: str, request: HttpRequest
    ) -> Awaitable[HttpResponse] | HttpResponse | DeferredResponse:
        """The common infer request (uncompressed, binary or JSON tensors in a body of modest size) decoded
        and queued at once; a model that cannot queue it so takes the awaited path. The connection writes
        a traced request's send times and closes its trace."""
        headers = request.headers
        body = request.body
        if "content-encoding" in headers or "accept-encoding" in headers:
            return self.handle(request)
        try:
            header_value = headers.get("inference-header-content-length")
            header_length = _parse_header_length(header_value) if header_value is not None else None
            if header_length == 0 or (
                len(body) >= OFF_LOOP_FROM and (header_length is None or header_length >= OFF_LOOP_FROM)
            ):
                return self.handle(request)
            infer_request = decode_infer_request(body, header_length, name, version)
            if self._forwarding is not None:
                self._forwarding.add_parameters(headers.items(), infer_request.parameters)
            if request.recv_start:  # tracing is on: `_sample`, inline on the common path
                infer_request.trace = request.trace = self._tracer.sample(
                    name, headers, (HTTP_RECV_START, request.recv_start, HTTP_RECV_END, request.recv_end)
                )
            queued = self._engine.infer_queued(infer_request)
        except Exception as exc:
            return _error_reply(exc, request)
        if queued is None:
            return self._run_decoded(infer_request, request)
        return _InferReply(queued, infer_request, request)

    async def _run_decoded(self, infer_request: InferRequest, request: HttpRequest) -> HttpResponse:
        try:
            return await self._run_infer(infer_request, request.headers, infer_request.trace)
        except Exception as exc:
            return _error_reply(exc, request)


class _InferReply(DeferredResponse):
    """An infer request queued by the engine, its response encoded when the batcher answers it."""

    __slots__ = ("_queued", "_infer_request", "_request", "_callback")

    def __init__(self, queued: QueuedInfer, infer_request: InferRequest, request: HttpRequest) -> None:
        self._queued = queued
        self._infer_request = infer_request
        self._request = request
        self._callback: Callable[[HttpResponse], None] | None = None

    def then(self, callback: Callable[[HttpResponse], None]) -> None:
        self._callback = callback
        self._queued.then(self._answered)

    def cancel(self) -> None:
        self._callback = None
        self._queued.cancel()

    def _answered(self, result: InferResponse | BaseException) -> None:
        callback = self._callback
        if callback is None:  # cancelled: the client is gone
            return
        self._callback = None  # which refers back to this object: no cycle left for the garbage collector
        if isinstance(result, BaseException):
            callback(_error_reply(result, self._request))
            return
        trace = self._infer_request.trace
        if trace is not None:
            trace.complete = time.perf_counter_ns()  # INFER_RESPONSE_COMPLETE, recorded with the send times
        try:
            payload, json_length = encode_infer_response(result, self._infer_request)
        except Exception as exc:
            callback(_error_reply(exc, self._request))
            return
        callback(_infer_response(payload, json_length))


def _infer_response(payload: bytes, json_length: int | None) -> HttpResponse:
    if json_length is None:
        return HttpResponse(200, payload, [_JSON])
    length = _HEADER_LENGTHS.get(json_length) or _header_length(json_length)
    return HttpResponse(200, payload, [_OCTET, length])


# The inference-header-content-length header of a binary response, by the length it gives: responses to
# one kind of request repeat one length. Bounded, for lengths that vary without end.
_HEADER_LENGTHS: dict[int, tuple[bytes, bytes]] = {}
_MAX_HEADER_LENGTHS = 256


def _header_length(json_length: int) -> tuple[bytes, bytes]:
    if len(_HEADER_LENGTHS) >= _MAX_HEADER_LENGTHS:
        _HEADER_LENGTHS.clear()
    header = _HEADER_LENGTHS[json_length] = (b"inference-header-content-length", b"%d" % json_length)
    return header


def _error_reply(exc: BaseException, request: HttpRequest) -> HttpResponse:
    """A request's failure as its answer: a known error with its status, anything else as INTERNAL (logged
    once with its traceback)."""
    if isinstance(exc, _MethodNotAllowed):
        return _text(405, error_body("Method Not Allowed"))
    if isinstance(exc, NereidError):
        return error_response(HTTP_STATUS.get(exc.status, 400), exc.message)
    log.error("unexpected error serving %s %s", request.method, request.path, exc_info=exc)
    return error_response(500, unexpected(exc).message)


def _api_group(path: str) -> str | None:
    """The API group a path belongs to, in --http-restricted-api's terms."""
    if path.startswith("/v2/health/"):
        return "health"
    if path == "/v2":
        return "metadata"
    if path.startswith("/v2/repository"):
        return "model-repository"
    if path == "/v2/models/stats":
        return "statistics"
    if path.endswith("/trace/setting"):
        return "trace"
    if path == "/v2/logging":
        return "logging"
    if "sharedmemory" in path:
        return "shared-memory"
    if path.startswith("/console/api/"):  # the console's live view reads the statistics
        return "statistics"
    match = _MODEL_ROUTE.fullmatch(path)
    return _GROUP_BY_ACTION.get(match.group(3)) if match is not None else None


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


def _raw_input(model: ModelMetadata, body_size: int) -> tuple[str, str, tuple[int, ...]]:
    """Name, datatype and batch-1 shape of the single input that a header-less body carries."""
    prefix = request_prefix("")
    if len(model.inputs) != 1:
        raise InvalidArgument(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got {len(model.inputs)} "
            f"inputs in '{model.name}' model configuration"
        )
    spec = model.inputs[0]
    batched = model.max_batch_size > 0
    dims = list(spec.shape[1:] if batched else spec.shape)
    if spec.datatype == "BYTES":
        if dims != [1]:
            raise InvalidArgument(
                f"{prefix}For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
    elif -1 in dims:
        if dims.count(-1) > 1:
            raise InvalidArgument(
                f"{prefix}The shape of the raw input '{spec.name}' can not be deduced because there are more "
                "than one variable-sized dimension"
            )
        # deduce the one variable dimension from the body size
        known = element_size(spec.datatype) * math.prod(d for d in dims if d != -1)
        if body_size % known:
            raise InvalidArgument(
                f"{prefix}raw input '{spec.name}' of model '{model.name}' has dims {dims}: a body of "
                f"{body_size} bytes does not determine its shape"
            )
        dims[dims.index(-1)] = body_size // known
    shape = ((1,) if batched else ()) + tuple(dims)
    return spec.name, spec.datatype, shape
