"""`/v1/embeddings`: each input an ordinary infer request (a batching model's dynamic batcher gathers
them), each answer a vector, as floats or as base64 of little-endian float32, OpenAI's two encodings."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from nereid.core.engine_client import EngineClient
from nereid.frontends.openai.convention import ModelConvention
from nereid.frontends.openai.errors import OpenAIError, unsupported_field
from nereid.frontends.openai.requests import EmbeddingsRequest
from nereid.tracing.trace import RequestTrace
from nereid.types import InferRequest, InferResponse, InferTensor


def check_embeddings_request(convention: ModelConvention, request: EmbeddingsRequest) -> None:
    if not convention.serves_embeddings:
        raise OpenAIError(
            400,
            f"model '{convention.name}' does not serve /v1/embeddings: {convention.routes_reason('embeddings')}",
            "model",
            "model_not_supported",
        )
    if request.texts is not None and convention.text_input is None:
        raise unsupported_field("input", convention.name, "it takes token ids, not text")
    if request.tokens is not None and convention.token_input is None:
        raise unsupported_field("input", convention.name, "it takes text, not token ids")
    for key in request.parameters:
        if key not in convention.embedding_parameters:
            raise unsupported_field(key, convention.name, "its config's openai_request_parameters omits it")


def _requests(
    convention: ModelConvention, request: EmbeddingsRequest, request_id: str, trace: RequestTrace | None
) -> list[InferRequest]:
    lead = (1,) if convention.batched else ()
    tensors: list[InferTensor] = []
    if request.texts is not None:
        assert convention.text_input is not None  # checked
        for text in request.texts:
            data = np.empty(lead + (1,), dtype=object)
            data.reshape(-1)[0] = text.encode()
            tensors.append(InferTensor(convention.text_input, "BYTES", data.shape, data))
    else:
        assert convention.token_input is not None and request.tokens is not None  # checked
        for tokens in request.tokens:
            data = np.asarray(tokens, dtype=np.int64).reshape(lead + (len(tokens),))
            tensors.append(InferTensor(convention.token_input, "INT64", data.shape, data))
    output = convention.embedding_output
    assert output is not None
    return [
        InferRequest(
            convention.name,
            "",
            [tensor],
            None,
            request_id,
            dict(request.parameters),
            trace=trace if index == 0 else None,  # the HTTP request's trace follows its first inference
        )
        for index, tensor in enumerate(tensors)
    ]


async def embed(
    engine: EngineClient,
    convention: ModelConvention,
    request: EmbeddingsRequest,
    request_id: str,
    trace: RequestTrace | None,
) -> dict[str, Any]:
    requests = _requests(convention, request, request_id, trace)
    if len(requests) == 1:
        responses = [await engine.infer(requests[0])]
    else:
        responses = await _all(engine, requests)
    data = []
    prompt_tokens = 0
    for index, response in enumerate(responses):
        vector = _vector(convention, response)
        if request.dimensions is not None and vector.size != request.dimensions:
            raise OpenAIError(
                500,
                f"model '{convention.name}' answered {vector.size} dimensions, not the {request.dimensions} asked for",
            )
        value: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode() if request.base64 else vector
        data.append({"object": "embedding", "index": index, "embedding": value})
    if request.texts is not None:
        prompt_tokens = sum(len(text.split()) for text in request.texts)
    else:
        prompt_tokens = sum(len(tokens) for tokens in request.tokens or ())
    return {
        "object": "list",
        "data": data,
        "model": convention.name,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


async def _all(engine: EngineClient, requests: list[InferRequest]) -> list[InferResponse]:
    """Every request's response; on the first failure the others are cancelled."""
    tasks = [asyncio.ensure_future(engine.infer(request)) for request in requests]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


def _vector(convention: ModelConvention, response: InferResponse) -> np.ndarray:
    for tensor in response.outputs:
        if tensor.name == convention.embedding_output:
            return np.asarray(tensor.data, dtype=np.float32).reshape(-1)
    raise OpenAIError(
        500, f"model '{convention.name}' answered without its output '{convention.embedding_output}'"
    )
