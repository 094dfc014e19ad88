"""`/v1/completions`' answer shapes: a `text_completion`, streamed as events of the same object."""

from __future__ import annotations

from typing import Any

from nereid.frontends.openai.generation import AnswerShape
from nereid.frontends.openai.text import Answer, Piece

ID_PREFIX = "cmpl-"
OBJECT = "text_completion"
CHUNK_OBJECT = "text_completion"


def _logprobs(entries: list[tuple[str, float]] | None, offset: int) -> dict[str, Any] | None:
    if entries is None:
        return None
    offsets = []
    for token, _ in entries:
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": [token for token, _ in entries],
        "token_logprobs": [logprob for _, logprob in entries],
        "top_logprobs": [{} for _ in entries],
        "text_offset": offsets,
    }


def answer_choice(index: int, answer: Answer, prompt: str, echo: bool, finish_reason: str) -> dict[str, Any]:
    return {
        "index": index,
        "text": (prompt if echo else "") + answer.text,
        "logprobs": _logprobs(answer.logprobs, len(prompt) if echo else 0),
        "finish_reason": finish_reason,
    }


def first_delta(index: int, prompt: str, echo: bool) -> dict[str, Any] | None:
    """An echoed prompt leads the stream; otherwise nothing comes before the model's first piece."""
    if not echo:
        return None
    return {"index": index, "text": prompt, "logprobs": None, "finish_reason": None}


def piece_delta(index: int, piece: Piece, tool_call_base: int) -> dict[str, Any] | None:
    if not piece.text:
        return None
    logprobs = _logprobs([(piece.text, sum(piece.logprobs))], 0) if piece.logprobs is not None else None
    return {"index": index, "text": piece.text, "logprobs": logprobs, "finish_reason": None}


def final_delta(index: int, finish_reason: str) -> dict[str, Any]:
    return {"index": index, "text": "", "logprobs": None, "finish_reason": finish_reason}


SHAPE = AnswerShape(ID_PREFIX, OBJECT, CHUNK_OBJECT, answer_choice, first_delta, piece_delta, final_delta)
