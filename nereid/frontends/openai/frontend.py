"""The OpenAI API on Nereid's HTTP server: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/v1/embeddings`, for any model that follows the tensor convention (convention.py).

The routes are a table of their own (routes.py's), in the API group `openai` of --http-restricted-api:
mounted on the HTTP frontend's table (the HTTP port), or served alone on a port of their own
(--openai-port) by `handle`, which answers 404, 405 and 403 from the same table in OpenAI's shape. Every
handler answers its own failures in OpenAI's shape. Everything here goes through `EngineClient`: these
requests are ordinary inference requests, counted in the model's statistics and metrics and traced like
any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import orjson

from nereid.core.engine_client import EngineClient
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.frontends.http.routes import Route, RouteTable
from nereid.frontends.openai import chat, completions, sse
from nereid.frontends.openai.embeddings import check_embeddings_request, embed
from nereid.frontends.openai.errors import OpenAIError, error_document, openai_error
from nereid.frontends.openai.generation import serve_text
from nereid.frontends.openai.models import ModelConventions
from nereid.frontends.openai.requests import chat_body, completion_request, embeddings_request
from nereid.frontends.openai.templates import ChatTemplates
from nereid.settings import ServerSettings
from nereid.tracing.trace import HTTP_RECV_END, HTTP_RECV_START, RequestTrace

PREFIX = "/v1"
API_GROUP = "openai"
_JSON = (b"content-type", b"application/json")
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

Handler = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse]]


def openai_error_response(status: int, message: str) -> HttpResponse:
    """A refusal of the HTTP layer (too large, bad syntax) in OpenAI's shape, for the port of its own."""
    return HttpResponse(status, error_document(status, message), [_JSON])


class OpenAIFrontend:
    """The `/v1` routes as a table, each handler's answer an `HttpResponse`, errors in OpenAI's shape."""

    def __init__(self, engine: EngineClient, settings: ServerSettings) -> None:
        self._engine = engine
        self._models = ModelConventions(engine)
        self._templates = ChatTemplates(settings.model_repositories)
        self._tracer = engine.tracer
        rules = [rule for rule in settings.http_restricted_api if API_GROUP in rule.groups]
        self._restriction = rules[0] if rules else None
        self._table = RouteTable(self.routes().routes)

    def routes(self) -> RouteTable:
        """The table to mount on the HTTP frontend's; the last pattern answers every other `/v1` path."""
        return RouteTable(
            [
                Route(PREFIX + "/models", ("GET",), API_GROUP, _openai(self._list_models)),
                Route(PREFIX + "/models/{model}", ("GET",), API_GROUP, _openai(self._model)),
                Route(PREFIX + "/chat/completions", ("POST",), API_GROUP, _openai(self._chat)),
                Route(PREFIX + "/completions", ("POST",), API_GROUP, _openai(self._completions)),
                Route(PREFIX + "/embeddings", ("POST",), API_GROUP, _openai(self._embeddings)),
                Route(PREFIX + "/{path:path}", _METHODS, API_GROUP, _openai(self._unknown)),
            ]
        )

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """The `/v1` routes alone, on a port of their own: what the HTTP frontend's table answers when they
        are mounted there (404, 405, 403 for a restricted group), in OpenAI's shape."""
        found = self._table.match(request.path)
        rule = self._restriction
        if rule is not None and found.group == API_GROUP and request.headers.get(rule.header) != rule.value:
            message = f"This API is restricted, expecting header '{rule.header}'"
            return _error_response(OpenAIError(403, message, None, "restricted_api"), request)
        route = found.routes.get(request.method)
        if route is None:
            if found.routes:
                allowed = ", ".join(sorted(found.routes))
                error = OpenAIError(405, f"{request.method} is not allowed on {request.path}; use {allowed}")
            else:
                error = OpenAIError(
                    404, f"Unknown route {request.method} {request.path}", None, "unknown_url"
                )
            return _error_response(error, request)
        return await route.handler(request, found.params)  # type: ignore[misc]

    async def _unknown(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        raise OpenAIError(404, f"Unknown route {request.method} {request.path}", None, "unknown_url")

    def _sample(self, name: str, request: HttpRequest) -> RequestTrace | None:
        """The trace of the request, where tracing samples it; the connection records its send times."""
        if not request.recv_start:  # tracing is off
            return None
        trace = request.trace = self._tracer.sample(
            name, request.headers, (HTTP_RECV_START, request.recv_start, HTTP_RECV_END, request.recv_end)
        )
        return trace

    async def _list_models(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse(200, orjson.dumps({"object": "list", "data": self._models.listed()}), [_JSON])

    async def _model(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse(200, orjson.dumps(self._models.one(params["model"])), [_JSON])

    async def _chat(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = chat_body(request.body)
        convention = self._models.get(body.model)
        config = self._engine.model_config_message(body.model)  # the template is read once per loaded version
        prompt = self._templates.render(
            body.model, config, convention.chat_template, body.messages, body.tools
        )
        text_request = dataclasses.replace(body.request, prompts=(prompt,))
        trace = self._sample(body.model, request)
        return await serve_text(
            self._engine, convention, text_request, chat.SHAPE, "/v1/chat/completions", trace
        )

    async def _completions(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        text_request = completion_request(request.body)
        convention = self._models.get(text_request.model)
        trace = self._sample(text_request.model, request)
        return await serve_text(
            self._engine, convention, text_request, completions.SHAPE, "/v1/completions", trace
        )

    async def _embeddings(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        embeddings = embeddings_request(request.body)
        convention = self._models.get(embeddings.model)
        check_embeddings_request(convention, embeddings)
        trace = self._sample(embeddings.model, request)
        document = await embed(self._engine, convention, embeddings, "", trace)
        return HttpResponse(200, sse.dumps(document), [_JSON])


def _openai(handler: Handler) -> Handler:
    """A handler whose failures are answered in OpenAI's shape (the HTTP frontend's would be Triton's)."""

    async def answer(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        try:
            return await handler(request, params)
        except Exception as exc:
            return _error_response(exc, request)

    return answer


def _error_response(exc: BaseException, request: HttpRequest) -> HttpResponse:
    status, body = openai_error(exc, f"{request.method} {request.path}")
    return HttpResponse(status, body, [_JSON])
