"""Text models run for chat and completions: a prompt becomes an ordinary infer request, each response a
`Piece` of the answer. A decoupled model's responses are the pieces of a stream; another model answers
in one piece. Both routes shape the pieces into their own JSON (chat.py, completions.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from nereid.core.engine_client import EngineClient
from nereid.frontends.http.generate import traced_events
from nereid.frontends.openai.convention import ModelConvention
from nereid.frontends.openai.errors import OpenAIError, unsupported_field
from nereid.frontends.openai.requests import TextRequest
from nereid.tracing.trace import RequestTrace
from nereid.types import InferRequest, InferResponse, InferTensor

_FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


@dataclass(slots=True)
class Piece:
    """What one response of the model adds to the answer."""

    text: str
    finish_reason: str | None = None
    logprobs: list[float] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def check_text_request(convention: ModelConvention, request: TextRequest, route: str) -> None:
    """Refuse what this model cannot serve before anything runs."""
    if not convention.serves_text:
        raise OpenAIError(
            400,
            f"model '{convention.name}' does not serve {route}: {convention.routes_reason('text')}",
            "model",
            "model_not_supported",
        )
    for key in request.parameters:
        if key not in convention.text_parameters:
            raise unsupported_field(key, convention.name, "its config's openai_request_parameters omits it")
    if request.logprobs and convention.logprobs_output is None:
        raise unsupported_field("logprobs", convention.name, "it has no logprobs output")


def infer_request(
    convention: ModelConvention,
    prompt: str,
    request: TextRequest,
    request_id: str,
    trace: RequestTrace | None,
) -> InferRequest:
    assert convention.text_input is not None  # check_text_request ran
    shape = (1, 1) if convention.batched else (1,)
    data = np.empty(shape, dtype=object)
    data.reshape(-1)[0] = prompt.encode()
    tensor = InferTensor(convention.text_input, "BYTES", shape, data)
    return InferRequest(
        convention.name, "", [tensor], None, request_id, dict(request.parameters), trace=trace
    )


async def pieces(
    engine: EngineClient, convention: ModelConvention, request: InferRequest, logprobs: bool
) -> AsyncGenerator[Piece, None]:
    """The model's answer piece by piece; an error the model sends ends it, raised. Closing this generator
    early (the client went away) cancels the request: the model sees `is_cancelled()`. The model's logprobs
    are kept where the client asked for them (`logprobs`)."""
    events = traced_events(engine, request)
    try:
        async for event in events:
            if event.error is not None:
                raise event.error
            if event.response is not None:
                result = piece(convention, event.response)
                if not logprobs:
                    result.logprobs = None
                yield result
    finally:
        await events.aclose()


def piece(convention: ModelConvention, response: InferResponse) -> Piece:
    """One response read by the convention's names; outputs it does not name are left alone."""
    result = Piece("")
    for tensor in response.outputs:
        name = tensor.name
        if name == convention.text_output:
            result.text = _text(tensor)
        elif not tensor.data.size:
            continue
        elif name == convention.finish_reason_output:
            reason = _text(tensor)
            if reason and reason not in _FINISH_REASONS:
                raise OpenAIError(500, f"model '{convention.name}' sent an unknown finish reason '{reason}'")
            result.finish_reason = reason or None
        elif name == convention.logprobs_output:
            result.logprobs = tensor.data.ravel().astype(float).tolist()
        elif name == convention.tool_calls_output:
            result.tool_calls = _tool_calls(convention.name, _text(tensor))
        elif name == convention.prompt_tokens_output:
            result.prompt_tokens = int(tensor.data.ravel()[0])
        elif name == convention.completion_tokens_output:
            result.completion_tokens = int(tensor.data.ravel()[0])
    return result


def _text(tensor: InferTensor | None) -> str:
    if tensor is None:
        return ""
    values = tensor.data.ravel()
    if len(values) == 1:  # a piece: one string (the common case, on every streamed token)
        value = values[0]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return "".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values)


def _tool_calls(model: str, text: str) -> list[dict[str, Any]] | None:
    """The calls as OpenAI writes them; a model may send `{"name", "arguments"}` objects, or OpenAI's shape."""
    if not text.strip():
        return None
    try:
        calls = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise OpenAIError(500, f"model '{model}' sent tool calls that are not JSON: {text[:200]!r}") from None
    if isinstance(calls, dict):
        calls = [calls]
    result = []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise OpenAIError(500, f"model '{model}' sent a tool call without a function name: {call!r}")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{index}"
        result.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return result or None


@dataclass(slots=True)
class Answer:
    """A whole answer, its pieces joined: what a request that does not stream gets for one choice."""

    text: str = ""
    finish_reason: str | None = None
    logprobs: list[tuple[str, float]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    pieces: int = 0
    counted: bool = False  # the model gave completion_tokens

    def add(self, piece: Piece) -> None:
        self.text += piece.text
        self.pieces += 1 if piece.text else 0
        if piece.finish_reason is not None:
            self.finish_reason = piece.finish_reason
        if piece.logprobs is not None:
            self.logprobs = (self.logprobs or []) + [(piece.text, sum(piece.logprobs))]
        if piece.tool_calls:
            self.tool_calls = (self.tool_calls or []) + piece.tool_calls
        if piece.prompt_tokens is not None:
            self.prompt_tokens = piece.prompt_tokens
        if piece.completion_tokens is not None:
            self.completion_tokens += piece.completion_tokens
            self.counted = True


def completion_tokens(answer: Answer, decoupled: bool) -> int:
    """The model's count where it gives one; else a response is a token (decoupled models stream a token a
    response), or the answer's words."""
    if answer.counted:
        return answer.completion_tokens
    return answer.pieces if decoupled else len(answer.text.split())


def prompt_tokens(answer: Answer, prompt: str) -> int:
    return answer.prompt_tokens if answer.prompt_tokens is not None else len(prompt.split())


def finish_reason(answer: Answer, request: TextRequest, tokens: int) -> str:
    if answer.finish_reason is not None:
        return answer.finish_reason
    if answer.tool_calls:
        return "tool_calls"
    max_tokens = request.parameters.get("max_tokens")
    return "length" if max_tokens is not None and tokens >= max_tokens else "stop"
