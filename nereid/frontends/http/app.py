"""Triton's HTTP/REST API: routing, bodies, headers, status codes."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from nereid.core.engine_client import EngineClient, ModelMetadata, QueuedInfer
from nereid.datatypes import element_size
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
from nereid.frontends.http.routes import Reply, Route, RouteTable
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


def _json(status: int, value: Any) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(value), [_JSON])


def _text(status: int, body: bytes = b"") -> HttpResponse:
    return HttpResponse(status, body, [_TEXT])


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, error_body(message), [_JSON])


class HttpFrontend:
    """Triton's HTTP/REST API: finds a request's route in the table and turns the engine's answer into a
    response. `routes` holds the v2 API, then the console's table where it is on; a later API mounts its
    own table there."""

    def __init__(self, engine: EngineClient, settings: ServerSettings) -> None:
        self._engine = engine
        self._max_input = settings.http_max_input_size
        self._restricted = {group: rule for rule in settings.http_restricted_api for group in rule.groups}
        self._large_bodies = LargeBodyDecoder()
        self._forwarding = header_forwarding(settings.http_header_forward_pattern)
        self._tracer = engine.tracer
        self.routes = RouteTable(self._v2_routes())
        if settings.allow_console:
            self.routes.mount(console.Console(engine, settings).routes())
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose: one line per request, at no cost otherwise
            self.dispatch = self._dispatch_and_log  # type: ignore[method-assign]

    def _v2_routes(self) -> list[Route]:
        model = "/v2/models/{model}[/versions/{version:int}]"
        routes = [
            Route("/v2/models/stats", ("GET",), "statistics", self._statistics),  # before the model routes
            Route(model, ("GET",), "metadata", self._model_metadata),
            Route(model + "/infer", ("POST",), "inference", self._infer),
            Route(model + "/generate", ("POST",), "inference", self._generate),
            Route(model + "/generate_stream", ("POST",), "inference", self._generate),
            Route(model + "/ready", ("GET",), "health", self._model_ready),
            Route(model + "/config", ("GET",), "model-config", self._model_config),
            Route(model + "/stats", ("GET",), "statistics", self._statistics),
            Route("/v2/health/live", ("GET",), "health", self._live),
            Route("/v2/health/ready", ("GET",), "health", self._ready),
            Route("/v2", ("GET",), "metadata", self._server_metadata),
            Route("/v2/repository[/{repository}]/index", ("POST",), "model-repository", self._index),
            Route(
                "/v2/repository[/{repository}]/models/{model}/load", ("POST",), "model-repository", self._load
            ),
            Route(
                "/v2/repository[/{repository}]/models/{model}/unload",
                ("POST",),
                "model-repository",
                self._unload,
            ),
            Route("/v2/logging", ("GET", "POST"), "logging", self._logging),
            Route("/v2[/models/{model}]/trace/setting", ("GET", "POST"), "trace", self._trace_setting),
        ]
        for kind in ("system", "cuda"):
            prefix = f"/v2/{kind}sharedmemory"
            routes += [
                Route(prefix + "[/region/{region}]/status", ("GET",), "shared-memory", self._region_status),
                Route(prefix + "[/region/{region}]/unregister", ("POST",), "shared-memory", self._unregister),
                Route(prefix + "/region/{region}/register", ("POST",), "shared-memory", self._register),
            ]
        return routes

    async def _dispatch_and_log(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = await _answer_of(HttpFrontend.dispatch(self, request))
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

    def dispatch(self, request: HttpRequest) -> Reply:
        """What the HTTP server calls: the answer of the request's route, now, later (a DeferredResponse,
        as an infer request is answered) or awaited; 404, 405 or 403 as the route table says."""
        found = self.routes.match(request.path)
        try:
            if self._restricted and found.group in self._restricted:
                self._check_restricted(found.group, request)
            route = found.routes.get(request.method)
            if route is None:
                if found.routes:
                    return _text(405, error_body("Method Not Allowed"))
                return _text(404, error_body("Not Found"))
            reply = route.handler(request, found.params)
        except Exception as exc:
            return _error_reply(exc, request)
        if type(reply) is HttpResponse or isinstance(reply, DeferredResponse):
            return reply
        return _awaited(reply, request)  # type: ignore[arg-type]

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """`dispatch`'s answer, awaited: for callers in process."""
        return await _answer_of(self.dispatch(request))

    def _check_restricted(self, group: str, request: HttpRequest) -> None:
        rule = self._restricted[group]
        if request.headers.get(rule.header) != rule.value:
            raise Forbidden(f"This API is restricted, expecting header '{rule.header}'")

    # health and metadata
    def _live(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _text(200 if self._engine.is_live() else 400)

    def _ready(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _text(200 if self._engine.is_ready() else 400)

    def _server_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _json(200, server_metadata_json(self._engine.server_metadata()))

    def _model_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        metadata = self._engine.model_metadata(params["model"], params.get("version", ""))
        return _json(200, model_metadata_json(metadata))

    async def _model_ready(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if await self._engine.model_ready(params["model"], params.get("version", "")):
            return _text(200)
        return _text(400, error_body("Model version not ready"))

    def _model_config(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _json(200, self._engine.model_config(params["model"], params.get("version", "")))

    def _statistics(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _json(200, self._engine.statistics(params.get("model", ""), params.get("version", "")))

    # model repository
    def _index(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        index = self._engine.repository_index(decode_index_request(request.body))
        return _json(200, repository_index_json(index))

    async def _load(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        name = params["model"]
        config, files = decode_load_request(request.body, name)
        await self._engine.load_model(name, config, files)
        return HttpResponse(200, b"", [_JSON])

    async def _unload(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        await self._engine.unload_model(params["model"], decode_unload_request(request.body))
        return HttpResponse(200, b"", [_JSON])

    def _logging(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """The logging extension: GET reads the log settings, POST changes the ones it names."""
        if request.method == "GET":
            return _json(200, self._engine.log_settings().as_dict())
        try:
            document = json_body.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
        values = document if isinstance(document, dict) else {}  # Triton reads no setting from a non-object
        return _json(200, self._engine.update_log_settings(values).as_dict())

    def _trace_setting(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        model_name = params.get("model", "")
        answer = self._engine.trace_setting(model_name)  # an unknown model is refused before the body is read
        if request.method == "POST":
            answer = self._engine.trace_setting(model_name, http_update(request.body))
        # Written pair by pair: a setting given more than once (opentelemetry `resource`) is listed as
        # many times, as in Triton's answer.
        body = (
            b"{" + b",".join(orjson.dumps(key) + b":" + orjson.dumps(value) for key, value in answer) + b"}"
        )
        return HttpResponse(200, body, [_JSON])

    # shared memory: the kind of region is the path's
    def _region_status(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        region = params.get("region")
        if _system(request):
            return _json(200, system_regions_json(self._engine.system_shared_memory_status(region)))
        return _json(200, cuda_regions_json(self._engine.cuda_shared_memory_status(region)))

    def _unregister(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        region = params.get("region")
        if _system(request):
            self._engine.unregister_system_shared_memory(region)
        else:
            self._engine.unregister_cuda_shared_memory(region)
        return HttpResponse(200, b"", [_JSON])

    def _register(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        region = params["region"]
        if _system(request):
            self._engine.register_system_shared_memory(region, *decode_system_register(request.body))
        else:
            self._engine.register_cuda_shared_memory(region, *decode_cuda_register(request.body))
        return HttpResponse(200, b"", [_JSON])

    # inference
    def _generate(self, request: HttpRequest, params: dict[str, str]) -> Awaitable[HttpResponse]:
        name = params["model"]
        generate_request = decode_generate_request(
            self._engine, name, params.get("version", ""), request.body
        )
        if request.recv_start:  # tracing is on
            generate_request.trace = self._sample(name, request)
        if request.path.endswith("/generate"):
            return generate(self._engine, generate_request)
        return event_stream(self._engine, generate_request, flat=True)

    def _infer(self, request: HttpRequest, params: dict[str, str]) -> Reply:
        """An infer request decoded and queued at once, answered by callback (a DeferredResponse); a
        compressed body or response, a header-less body and a large one (decoded off the loop) are
        decoded, queued and answered by `_infer_awaited`. The connection writes a traced request's send
        times and closes its trace."""
        headers = request.headers
        body = request.body
        name = params["model"]
        version = params.get("version", "")
        if "content-encoding" in headers or "accept-encoding" in headers:
            return self._infer_awaited(name, version, request)
        header_value = headers.get("inference-header-content-length")
        header_length = _parse_header_length(header_value) if header_value is not None else None
        if header_length == 0 or (
            len(body) >= OFF_LOOP_FROM and (header_length is None or header_length >= OFF_LOOP_FROM)
        ):
            return self._infer_awaited(name, version, request)
        infer_request = decode_infer_request(body, header_length, name, version)
        queued = self._queue(infer_request, request)
        if queued is None:
            return self._decoupled(infer_request, request)
        return _InferReply(queued, infer_request, request)

    async def _infer_awaited(self, name: str, version: str, request: HttpRequest) -> HttpResponse:
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
        queued = self._queue(infer_request, request)
        if queued is None:
            return await self._decoupled(infer_request, request)
        response = await _answer_of(_InferReply(queued, infer_request, request))
        # Triton compresses infer responses only; clients read other bodies as plain JSON.
        accept = headers.get("accept-encoding")
        if accept and response.status == 200:
            encoding = choose_encoding(accept)
            if encoding != "identity":
                response.body = compress(response.body, encoding)
                response.headers.append((b"content-encoding", encoding.encode()))
        return response

    def _queue(self, infer_request: InferRequest, request: HttpRequest) -> QueuedInfer | None:
        """The request, with its forwarded headers as parameters and its trace where it is sampled, handed
        to the engine; None for a decoupled model."""
        if self._forwarding is not None:
            self._forwarding.add_parameters(request.headers.items(), infer_request.parameters)
        if request.recv_start:  # tracing is on
            infer_request.trace = self._sample(infer_request.model_name, request)
        try:
            return self._engine.infer_queued(infer_request)
        except DecoupledModel:
            return None

    async def _decoupled(self, infer_request: InferRequest, request: HttpRequest) -> HttpResponse:
        if wants_events(request.headers.get("accept")):  # beyond Triton: the responses as a stream
            return await event_stream(self._engine, infer_request, flat=False)
        raise DecoupledModel("HTTP end point")

    def _sample(self, name: str, request: HttpRequest) -> RequestTrace | None:
        """The trace of an inference request, when it is sampled; the connection took its receive times,
        and records its send times and closes it once the response is written."""
        trace = request.trace = self._tracer.sample(
            name, request.headers, (HTTP_RECV_START, request.recv_start, HTTP_RECV_END, request.recv_end)
        )
        return trace


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


def _system(request: HttpRequest) -> bool:
    return request.path.startswith("/v2/system")


async def _awaited(reply: Awaitable[HttpResponse], request: HttpRequest) -> HttpResponse:
    """An awaited handler's answer, its failure answered as `dispatch` answers one."""
    try:
        return await reply
    except Exception as exc:
        return _error_reply(exc, request)


async def _answer_of(reply: Reply) -> HttpResponse:
    if isinstance(reply, HttpResponse):
        return reply
    if isinstance(reply, DeferredResponse):
        answered: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()
        reply.then(answered.set_result)
        try:
            return await answered
        except asyncio.CancelledError:  # the client went away: so does its request
            reply.cancel()
            raise
    return await reply


def _error_reply(exc: BaseException, request: HttpRequest) -> HttpResponse:
    """A request's failure as its answer: a known error with its status, anything else as INTERNAL (logged
    once with its traceback)."""
    if isinstance(exc, NereidError):
        return error_response(HTTP_STATUS.get(exc.status, 400), exc.message)
    log.error("unexpected error serving %s %s", request.method, request.path, exc_info=exc)
    return error_response(500, unexpected(exc).message)


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
