"""`/v1/chat/completions`' answer shapes: a `chat.completion`, or `chat.completion.chunk` events."""

from __future__ import annotations

from typing import Any

from nereid.frontends.openai.generation import AnswerShape
from nereid.frontends.openai.text import Answer, Piece

ID_PREFIX = "chatcmpl-"
OBJECT = "chat.completion"
CHUNK_OBJECT = "chat.completion.chunk"


def _logprobs(entries: list[tuple[str, float]] | None) -> dict[str, Any] | None:
    if entries is None:
        return None
    return {
        "content": [
            {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}
            for token, logprob in entries
        ],
        "refusal": None,
    }


def answer_choice(index: int, answer: Answer, prompt: str, echo: bool, finish_reason: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer.text if answer.text or not answer.tool_calls else None,
    }
    if answer.tool_calls:
        message["tool_calls"] = answer.tool_calls
    return {
        "index": index,
        "message": message,
        "logprobs": _logprobs(answer.logprobs),
        "finish_reason": finish_reason,
    }


def first_delta(index: int, prompt: str, echo: bool) -> dict[str, Any]:
    """A choice's first chunk: the role, as OpenAI sends it before any content."""
    return {
        "index": index,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }


def piece_delta(index: int, piece: Piece, tool_call_base: int) -> dict[str, Any] | None:
    delta: dict[str, Any] = {}
    if piece.text:
        delta["content"] = piece.text
    if piece.tool_calls:
        delta["tool_calls"] = [
            {"index": tool_call_base + offset, **call} for offset, call in enumerate(piece.tool_calls)
        ]
    if not delta:
        return None
    logprobs = _logprobs([(piece.text, sum(piece.logprobs))]) if piece.logprobs is not None else None
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}


def final_delta(index: int, finish_reason: str) -> dict[str, Any]:
    return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}


SHAPE = AnswerShape(ID_PREFIX, OBJECT, CHUNK_OBJECT, answer_choice, first_delta, piece_delta, final_delta)
