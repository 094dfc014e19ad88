"""The bodies of the OpenAI routes read into typed requests; a missing or bad field is a 400 naming it.

A field OpenAI defines but this server cannot honour (`logit_bias`, `suffix`) is refused, as is a field
OpenAI does not define, so that a client never believes a setting took effect when it did not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from nereid.frontends.http import json_body
from nereid.frontends.openai.errors import OpenAIError, bad_field

_MAX_CHOICES = 128  # choices per request (prompts times n): each is a request to the model


@dataclass(frozen=True, slots=True)
class TextRequest:
    """A chat or completions request: the prompts (one per choice set) and what shapes the answer."""

    model: str
    prompts: tuple[str, ...]
    stream: bool
    include_usage: bool
    n: int
    echo: bool
    logprobs: bool
    parameters: dict[str, Any] = field(default_factory=dict)  # fields passed to the model, by name


@dataclass(frozen=True, slots=True)
class ChatBody:
    """A chat request before its template makes the prompt."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[Any] | None
    request: TextRequest  # with no prompt yet


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    texts: tuple[str, ...] | None  # one of texts and tokens
    tokens: tuple[tuple[int, ...], ...] | None
    base64: bool
    dimensions: int | None
    parameters: dict[str, Any] = field(default_factory=dict)


_SAMPLING = {
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "user",
    "stream",
    "stream_options",
    "n",
    "model",
}
_CHAT_FIELDS = _SAMPLING | {
    "messages",
    "max_completion_tokens",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "response_format",
    "parallel_tool_calls",
}
_COMPLETION_FIELDS = _SAMPLING | {"prompt", "echo", "logprobs"}
_EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _document(body: bytes, known: set[str]) -> dict[str, Any]:
    try:
        document = json_body.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(400, f"the body is not valid JSON: {exc}", None, "invalid_json") from None
    if not isinstance(document, dict):
        raise OpenAIError(400, "the body must be a JSON object", None, "invalid_json")
    for key in document:
        if key not in known:
            raise OpenAIError(400, f"Unrecognized request argument supplied: {key}", key, "unknown_parameter")
    return document


def _model(document: dict[str, Any]) -> str:
    model = document.get("model")
    if not isinstance(model, str) or not model:
        raise bad_field("model", "'model' must be the name of a model (a non-empty string)")
    return model


def _bool(document: dict[str, Any], key: str) -> bool:
    value = document.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_field(key, f"'{key}' must be a boolean")
    return value


def _int(document: dict[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"at least {low}" if high is None else f"from {low} to {high}"
        raise bad_field(key, f"'{key}' must be an integer {bounds}")
    return value


def _number(document: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise bad_field(key, f"'{key}' must be a number from {low:g} to {high:g}")
    return float(value)


def _stop(document: dict[str, Any]) -> list[str] | None:
    value = document.get("stop")
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and len(value) <= 4 and all(isinstance(item, str) for item in value):
        return value
    raise bad_field("stop", "'stop' must be a string or a list of at most 4 strings")


def _sampling(document: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields given, checked, as the model receives them (a list as JSON text)."""
    parameters: dict[str, Any] = {}
    max_tokens = _int(document, "max_tokens", 1)
    if max_tokens is not None:
        parameters["max_tokens"] = max_tokens
    for key, low, high in (
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("frequency_penalty", -2.0, 2.0),
        ("presence_penalty", -2.0, 2.0),
    ):
        value = _number(document, key, low, high)
        if value is not None:
            parameters[key] = value
    seed = _int(document, "seed", -(2**63), 2**63 - 1)
    if seed is not None:
        parameters["seed"] = seed
    stop = _stop(document)
    if stop is not None:
        parameters["stop"] = orjson.dumps(stop).decode()
    return parameters


def _stream_options(document: dict[str, Any], stream: bool) -> bool:
    options = document.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise bad_field("stream_options", "'stream_options' is only allowed when 'stream' is true")
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise bad_field("stream_options", "'stream_options' must be an object with 'include_usage' only")
    return _bool(options, "include_usage")


def _json_parameter(document: dict[str, Any], key: str, types: tuple[type, ...]) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, types):
        names = " or ".join(
            "an object" if t is dict else "a list" if t is list else "a string" for t in types
        )
        raise bad_field(key, f"'{key}' must be {names}")
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def chat_body(body: bytes) -> ChatBody:
    document = _document(body, _CHAT_FIELDS)
    model = _model(document)
    messages = _messages(document.get("messages"))
    stream = _bool(document, "stream")
    parameters = _sampling(document)
    max_completion = _int(document, "max_completion_tokens", 1)
    if max_completion is not None:
        parameters["max_tokens"] = max_completion  # the newer name of the same limit
    logprobs = _bool(document, "logprobs")
    top_logprobs = _int(document, "top_logprobs", 0, 20)
    if top_logprobs is not None:
        if not logprobs:
            raise bad_field("top_logprobs", "'top_logprobs' needs 'logprobs' to be true")
        parameters["top_logprobs"] = top_logprobs
    if logprobs:
        parameters["logprobs"] = True
    tools = document.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(_is_tool(tool) for tool in tools):
            raise bad_field(
                "tools", '\'tools\' must be a list of {"type": "function", "function": {"name"...}}'
            )
        parameters["tools"] = orjson.dumps(tools).decode()
    for key, types in (("tool_choice", (str, dict)), ("response_format", (dict,))):
        value = _json_parameter(document, key, types)
        if value is not None:
            parameters[key] = value
    _bool(document, "parallel_tool_calls")  # checked; a model makes the calls it makes
    request = TextRequest(
        model,
        (),
        stream,
        _stream_options(document, stream),
        _int(document, "n", 1, _MAX_CHOICES) or 1,
        False,
        logprobs,
        parameters,
    )
    return ChatBody(model, messages, tools, request)


def _is_tool(tool: Any) -> bool:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return False
    function = tool.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str)


def _messages(value: Any) -> list[dict[str, Any]]:
    """The messages as the template sees them: content parts joined into one string."""
    if not isinstance(value, list) or not value:
        raise bad_field("messages", "'messages' must be a non-empty list of messages")
    messages = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_field(where, f"'{where}' must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in _ROLES:
            raise bad_field(f"{where}.role", f"'{where}.role' must be one of {', '.join(_ROLES)}")
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(_text_part(part, f"{where}.content") for part in content)
        elif content is None:
            if role != "assistant" or not message.get("tool_calls"):
                raise bad_field(f"{where}.content", f"'{where}.content' is missing")
            content = ""
        elif not isinstance(content, str):
            raise bad_field(f"{where}.content", f"'{where}.content' must be a string or a list of text parts")
        entry: dict[str, Any] = {"role": role, "content": content}
        for key in ("name", "tool_calls", "tool_call_id"):
            if key in message:
                entry[key] = message[key]
        messages.append(entry)
    return messages


def _text_part(part: Any, where: str) -> str:
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    raise bad_field(where, f'\'{where}\' parts must be text parts ({{"type": "text", "text": ...}})')


def completion_request(body: bytes) -> TextRequest:
    document = _document(body, _COMPLETION_FIELDS)
    model = _model(document)
    prompt = document.get("prompt")
    if isinstance(prompt, str):
        prompts: tuple[str, ...] = (prompt,)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = tuple(prompt)
    else:
        raise bad_field("prompt", "'prompt' must be a string or a non-empty list of strings")
    n = _int(document, "n", 1, _MAX_CHOICES) or 1
    if len(prompts) * n > _MAX_CHOICES:
        raise bad_field("prompt", f"a request may ask for at most {_MAX_CHOICES} choices (prompts times n)")
    stream = _bool(document, "stream")
    parameters = _sampling(document)
    logprobs = _int(document, "logprobs", 0, 5)
    if logprobs is not None:
        parameters["logprobs"] = True
        parameters["top_logprobs"] = logprobs
    return TextRequest(
        model,
        prompts,
        stream,
        _stream_options(document, stream),
        n,
        _bool(document, "echo"),
        logprobs is not None,
        parameters,
    )


def embeddings_request(body: bytes) -> EmbeddingsRequest:
    document = _document(body, _EMBEDDING_FIELDS)
    model = _model(document)
    value = document.get("input")
    texts: tuple[str, ...] | None = None
    tokens: tuple[tuple[int, ...], ...] | None = None
    if isinstance(value, str):
        texts = (value,)
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        texts = tuple(value)
    elif isinstance(value, list) and value and all(_is_tokens(v) for v in value):
        tokens = tuple(tuple(v) for v in value)
    elif isinstance(value, list) and value and _is_tokens(value):
        tokens = (tuple(value),)
    else:
        raise bad_field(
            "input", "'input' must be a string, a list of strings, or token arrays (lists of integers)"
        )
    if len(texts or tokens or ()) > 2048:
        raise bad_field("input", "'input' may hold at most 2048 items")
    encoding = document.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise bad_field("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    dimensions = _int(document, "dimensions", 1)
    parameters: dict[str, Any] = {}
    if dimensions is not None:
        parameters["dimensions"] = dimensions
    if isinstance(document.get("user"), str):
        parameters["user"] = document["user"]
    return EmbeddingsRequest(model, texts, tokens, encoding == "base64", dimensions, parameters)


def _is_tokens(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**63 for t in value)
    )
