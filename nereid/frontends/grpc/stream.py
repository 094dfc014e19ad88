"""ModelStreamInfer: many requests in, their responses out in order, errors inside the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from nereid.engine import Engine
from nereid.errors import NereidError
from nereid.frontends.grpc.codec import decode_infer_request, encode_infer_response

EMPTY_FINAL_KEY = "triton_enable_empty_final_response"

# One request's stream responses: responses, and _Failures for errors, as they come.
StreamCall = Callable[[pb.ModelInferRequest], AsyncIterator["pb.ModelStreamInferResponse | _Failure"]]


@dataclass(frozen=True, slots=True)
class _Failure:
    error: NereidError
    request_id: str
    final: bool = True


def final_response(response: pb.ModelInferResponse, final: bool = True) -> pb.ModelStreamInferResponse:
    """A stream response; `final` completes its request (Triton's `triton_final_response`)."""
    response.parameters["triton_final_response"].bool_param = final
    return pb.ModelStreamInferResponse(infer_response=response)


def error_response(message: str, request_id: str, final: bool = True) -> pb.ModelStreamInferResponse:
    # Triton 2.51 sends the request id with the error. Nereid also marks the response final when it ends
    # the request, so that a client waiting for `triton_final_response` knows the request is over.
    response = pb.ModelInferResponse(id=request_id)
    response.parameters["triton_final_response"].bool_param = final
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


async def request_stream(
    engine: Engine, message: pb.ModelInferRequest
) -> AsyncIterator[pb.ModelStreamInferResponse | _Failure]:
    """The stream responses to one request: one for most models, any number for decoupled ones. A
    decoupled model's flags-only final response is sent only when the request asks for it
    (`triton_enable_empty_final_response`), as Triton does."""
    request = decode_infer_request(message)
    async for event in engine.infer_stream(request):
        if event.error is not None:
            yield _Failure(event.error, message.id, event.final)
        elif event.response is not None:
            yield final_response(encode_infer_response(event.response), event.final)
        elif request.parameters.get(EMPTY_FINAL_KEY) is True:
            yield final_response(pb.ModelInferResponse(model_name=message.model_name, id=message.id))


async def stream_responses(
    call: StreamCall, requests: AsyncIterator[pb.ModelInferRequest], strict: bool
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """Run the requests of a stream concurrently; yield their responses in request order, as Triton does
    (a decoupled model's responses to one request as they come, before those of the next request).

    An error becomes an `error_message` response and the stream goes on, unless `strict` (the client sent
    `triton_grpc_error: true`), where the first error is raised to end the stream with its status.
    """
    started: asyncio.Queue[asyncio.Queue[pb.ModelStreamInferResponse | _Failure | None] | None]
    started = asyncio.Queue()
    running: set[asyncio.Task[None]] = set()

    async def one(message: pb.ModelInferRequest, out: asyncio.Queue[Any]) -> None:
        try:
            async for item in call(message):
                out.put_nowait(item)
        except NereidError as exc:
            out.put_nowait(_Failure(exc, message.id))
        finally:
            out.put_nowait(None)

    async def read() -> None:
        try:
            async for message in requests:
                out: asyncio.Queue[pb.ModelStreamInferResponse | _Failure | None] = asyncio.Queue()
                task = asyncio.create_task(one(message, out))
                running.add(task)
                task.add_done_callback(running.discard)
                started.put_nowait(out)
        finally:
            started.put_nowait(None)  # the end

    reader = asyncio.create_task(read())
    try:
        while (out := await started.get()) is not None:
            while (item := await out.get()) is not None:
                if isinstance(item, _Failure):
                    if strict:
                        raise item.error
                    yield error_response(item.error.message, item.request_id, item.final)
                else:
                    yield item
        await reader  # a failure to read the stream ends the RPC with it
    finally:
        # The client went away or the stream failed: cancel what still runs, so the engine drops it
        # (and decoupled models hear that their requests are cancelled).
        reader.cancel()
        for task in list(running):
            task.cancel()
