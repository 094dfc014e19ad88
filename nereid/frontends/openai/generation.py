"""Chat and completions served: each prompt, `n` times, run as an ordinary request; the answers joined
into one document, or streamed as server-sent events while the model sends its pieces.

Choices stream one after another (each chunk names its `index`, as OpenAI's do). The status of a stream
is decided by its first piece: an error before it is an ordinary error answer; an error after it is an
`{"error": ...}` event, then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from nereid.core.engine_client import EngineClient
from nereid.frontends.http.protocol import HttpResponse
from nereid.frontends.openai import sse
from nereid.frontends.openai.convention import ModelConvention
from nereid.frontends.openai.errors import openai_error
from nereid.frontends.openai.requests import TextRequest
from nereid.frontends.openai.text import (
    Answer,
    Piece,
    check_text_request,
    completion_tokens,
    finish_reason,
    infer_request,
    pieces,
    prompt_tokens,
)
from nereid.tracing.trace import RequestTrace

_JSON = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """How a route writes its answers (chat.py, completions.py)."""

    id_prefix: str
    object: str
    chunk_object: str
    answer_choice: Callable[[int, Answer, str, bool, str], dict[str, Any]]
    first_delta: Callable[[int, str, bool], dict[str, Any] | None]
    piece_delta: Callable[[int, Piece, int], dict[str, Any] | None]
    final_delta: Callable[[int, str], dict[str, Any]]


async def serve_text(
    engine: EngineClient,
    convention: ModelConvention,
    request: TextRequest,
    shape: AnswerShape,
    route: str,
    trace: RequestTrace | None,
) -> HttpResponse:
    check_text_request(convention, request, route)
    request_id = shape.id_prefix + uuid.uuid4().hex
    created = int(time.time())
    # one job per choice: every prompt, n times; the HTTP request's trace follows the first
    jobs = [prompt for prompt in request.prompts for _ in range(request.n)]
    if not request.stream:
        answers = await _answers(engine, convention, request, jobs, request_id, trace)
        return HttpResponse(
            200, _document(convention, request, shape, jobs, answers, request_id, created), [_JSON]
        )
    first_pieces = pieces(
        engine, convention, infer_request(convention, jobs[0], request, request_id, trace), request.logprobs
    )
    try:
        first = await anext(first_pieces)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await first_pieces.aclose()
        raise
    stream = _stream(engine, convention, request, shape, jobs, request_id, created, first_pieces, first)
    return HttpResponse(200, b"", [sse.CONTENT_TYPE, sse.NO_BUFFERING], stream=stream)


async def _answers(
    engine: EngineClient,
    convention: ModelConvention,
    request: TextRequest,
    jobs: list[str],
    request_id: str,
    trace: RequestTrace | None,
) -> list[Answer]:
    async def run(index: int, prompt: str) -> Answer:
        answer = Answer()
        inference = infer_request(convention, prompt, request, request_id, trace if index == 0 else None)
        async for piece in pieces(engine, convention, inference, request.logprobs):
            answer.add(piece)
        return answer

    if len(jobs) == 1:
        return [await run(0, jobs[0])]
    tasks = [asyncio.ensure_future(run(index, prompt)) for index, prompt in enumerate(jobs)]
    try:
        return list(await asyncio.gather(*tasks))
    finally:  # on the first failure the other choices stop
        for task in tasks:
            task.cancel()


def _document(
    convention: ModelConvention,
    request: TextRequest,
    shape: AnswerShape,
    jobs: list[str],
    answers: list[Answer],
    request_id: str,
    created: int,
) -> bytes:
    choices = []
    total_completion = 0
    total_prompt = 0
    for index, (prompt, answer) in enumerate(zip(jobs, answers, strict=True)):
        tokens = completion_tokens(answer, convention.decoupled)
        total_completion += tokens
        if index % request.n == 0:  # a prompt counts once, whatever n
            total_prompt += prompt_tokens(answer, prompt)
        choices.append(
            shape.answer_choice(index, answer, prompt, request.echo, finish_reason(answer, request, tokens))
        )
    return sse.dumps(
        {
            "id": request_id,
            "object": shape.object,
            "created": created,
            "model": convention.name,
            "choices": choices,
            "usage": _usage(total_prompt, total_completion),
        }
    )


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _stream(
    engine: EngineClient,
    convention: ModelConvention,
    request: TextRequest,
    shape: AnswerShape,
    jobs: list[str],
    request_id: str,
    created: int,
    first_pieces: AsyncGenerator[Piece, None],
    first: Piece | None,
) -> AsyncIterator[bytes]:
    """The events of a streamed answer. The connection closes this generator when the client goes away,
    which closes the model's stream: the request is cancelled."""
    head: dict[str, Any] = {
        "id": request_id,
        "object": shape.chunk_object,
        "created": created,
        "model": convention.name,
    }
    if request.include_usage:
        head["usage"] = None

    def chunk(choice: dict[str, Any]) -> bytes:
        return sse.event({**head, "choices": [choice]})

    current = first_pieces
    total_prompt = total_completion = 0
    try:
        for index, prompt in enumerate(jobs):
            if index > 0:
                inference = infer_request(convention, prompt, request, request_id, None)
                current = pieces(engine, convention, inference, request.logprobs)
            opening = shape.first_delta(index, prompt, request.echo)
            lead = chunk(opening) if opening is not None else b""
            answer = Answer()
            tool_calls = 0
            if index == 0 and first is not None:  # the piece that came before the answer began
                answer.add(first)
                delta = shape.piece_delta(index, first, 0)
                tool_calls = len(first.tool_calls or ())
                if delta is not None:
                    lead += chunk(delta)  # one write with the opening: the first token sooner
            if lead:
                yield lead
            async for piece in current:
                answer.add(piece)
                delta = shape.piece_delta(index, piece, tool_calls)
                tool_calls += len(piece.tool_calls or ())
                if delta is not None:
                    yield chunk(delta)
            tokens = completion_tokens(answer, convention.decoupled)
            total_completion += tokens
            if index % request.n == 0:
                total_prompt += prompt_tokens(answer, prompt)
            yield chunk(shape.final_delta(index, finish_reason(answer, request, tokens)))
        if request.include_usage:
            yield sse.event({**head, "choices": [], "usage": _usage(total_prompt, total_completion)})
    except Exception as exc:  # the model failed after the stream began: said in the stream
        _, body = openai_error(exc, f"a stream of model '{convention.name}'")
        yield sse.raw_event(body)
    finally:
        await current.aclose()
        if current is not first_pieces:
            await first_pieces.aclose()
    yield sse.DONE
