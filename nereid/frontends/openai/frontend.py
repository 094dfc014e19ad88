"""The OpenAI API on Nereid's HTTP server: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/v1/embeddings`, for any model that follows the tensor convention (convention.py).

The routes are a table (method, path pattern, handler) under `/v1`, served on the HTTP port or on a port
of their own (--openai-port). Everything here goes through `EngineClient`: these requests are ordinary
inference requests, counted in the model's statistics and metrics and traced like any other. The API
group of the routes is `openai` for --http-restricted-api; a call without the header is answered 401, as
OpenAI answers a missing key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from nereid.engine_client import EngineClient
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.frontends.openai import chat, completions, sse
from nereid.frontends.openai.embeddings import check_embeddings_request, embed
from nereid.frontends.openai.errors import OpenAIError, error_document, openai_error
from nereid.frontends.openai.generation import AnswerShape, serve_text
from nereid.frontends.openai.models import ModelConventions
from nereid.frontends.openai.requests import chat_body, completion_request, embeddings_request
from nereid.frontends.openai.templates import ChatTemplates
from nereid.settings import ServerSettings
from nereid.tracing.trace import HTTP_RECV_END, HTTP_RECV_START, RequestTrace

PREFIX = "/v1"
API_GROUP = "openai"
_JSON = (b"content-type", b"application/json")

CHAT = AnswerShape(
    chat.ID_PREFIX,
    chat.OBJECT,
    chat.CHUNK_OBJECT,
    chat.answer_choice,
    chat.first_delta,
    chat.piece_delta,
    chat.final_delta,
)
COMPLETIONS = AnswerShape(
    completions.ID_PREFIX,
    completions.OBJECT,
    completions.CHUNK_OBJECT,
    completions.answer_choice,
    completions.first_delta,
    completions.piece_delta,
    completions.final_delta,
)

Handler = Callable[["OpenAIFrontend", HttpRequest, "re.Match[str]"], Awaitable[HttpResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


def openai_error_response(status: int, message: str) -> HttpResponse:
    """A refusal of the HTTP layer (too large, bad syntax) in OpenAI's shape, for the port of its own."""
    return HttpResponse(status, error_document(status, message), [_JSON])


class OpenAIFrontend:
    """Routes `/v1` requests to their handlers; each answer an `HttpResponse`, errors in OpenAI's shape."""

    def __init__(self, engine: EngineClient, settings: ServerSettings) -> None:
        self._engine = engine
        self._models = ModelConventions(engine)
        self._templates = ChatTemplates(settings.model_repositories)
        self._tracer = engine.tracer
        rules = [rule for rule in settings.http_restricted_api if API_GROUP in rule.groups]
        self._restriction = rules[0] if rules else None

    @staticmethod
    def serves(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def handle(self, request: HttpRequest) -> HttpResponse:
        try:
            if self._restriction is not None:
                rule = self._restriction
                if request.headers.get(rule.header) != rule.value:
                    raise OpenAIError(
                        401,
                        f"This API is restricted, expecting header '{rule.header}'",
                        None,
                        "restricted_api",
                    )
            allowed = []
            for route in ROUTES:
                match = route.pattern.fullmatch(request.path)
                if match is None:
                    continue
                if route.method == request.method:
                    return await route.handler(self, request, match)
                allowed.append(route.method)
            if allowed:
                raise OpenAIError(
                    405, f"{request.method} is not allowed on {request.path}; use {', '.join(allowed)}"
                )
            raise OpenAIError(404, f"Unknown route {request.method} {request.path}", None, "unknown_url")
        except Exception as exc:
            status, body = openai_error(exc, f"{request.method} {request.path}")
            return HttpResponse(status, body, [_JSON])

    def _sample(self, name: str, request: HttpRequest) -> RequestTrace | None:
        """The trace of the request, where tracing samples it; the connection records its send times."""
        if not request.recv_start:  # tracing is off
            return None
        trace = request.trace = self._tracer.sample(
            name, request.headers, (HTTP_RECV_START, request.recv_start, HTTP_RECV_END, request.recv_end)
        )
        return trace

    async def _list_models(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        return HttpResponse(200, orjson.dumps({"object": "list", "data": self._models.listed()}), [_JSON])

    async def _model(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        return HttpResponse(200, orjson.dumps(self._models.one(match.group(1))), [_JSON])

    async def _chat(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        body = chat_body(request.body)
        convention = self._models.get(body.model)
        config = self._engine.model_config_message(body.model)  # the template is read once per loaded version
        prompt = self._templates.render(
            body.model, config, convention.chat_template, body.messages, body.tools
        )
        text_request = dataclasses.replace(body.request, prompts=(prompt,))
        trace = self._sample(body.model, request)
        return await serve_text(self._engine, convention, text_request, CHAT, "/v1/chat/completions", trace)

    async def _completions(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        text_request = completion_request(request.body)
        convention = self._models.get(text_request.model)
        trace = self._sample(text_request.model, request)
        return await serve_text(self._engine, convention, text_request, COMPLETIONS, "/v1/completions", trace)

    async def _embeddings(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        embeddings = embeddings_request(request.body)
        convention = self._models.get(embeddings.model)
        check_embeddings_request(convention, embeddings)
        trace = self._sample(embeddings.model, request)
        document = await embed(self._engine, convention, embeddings, "", trace)
        return HttpResponse(200, sse.dumps(document), [_JSON])


ROUTES = (
    Route("GET", re.compile(r"/v1/models"), OpenAIFrontend._list_models),
    Route("GET", re.compile(r"/v1/models/([^/]+)"), OpenAIFrontend._model),
    Route("POST", re.compile(r"/v1/chat/completions"), OpenAIFrontend._chat),
    Route("POST", re.compile(r"/v1/completions"), OpenAIFrontend._completions),
    Route("POST", re.compile(r"/v1/embeddings"), OpenAIFrontend._embeddings),
)
