"""ModelStreamInfer: many requests in, their responses out in order, errors inside the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from tritonclient.grpc import service_pb2 as pb

from nereid.errors import NereidError

InferCall = Callable[[pb.ModelInferRequest], Awaitable[pb.ModelInferResponse]]


@dataclass(frozen=True, slots=True)
class _Failure:
    error: NereidError
    request_id: str


def final_response(response: pb.ModelInferResponse) -> pb.ModelStreamInferResponse:
    """A stream response that completes its request (Triton's `triton_final_response`)."""
    response.parameters["triton_final_response"].bool_param = True
    return pb.ModelStreamInferResponse(infer_response=response)


def error_response(message: str, request_id: str) -> pb.ModelStreamInferResponse:
    # Triton 2.51 sends the request id with the error. Nereid also marks the response final, so that a
    # client waiting for `triton_final_response` knows the request is over.
    response = pb.ModelInferResponse(id=request_id)
    response.parameters["triton_final_response"].bool_param = True
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


async def stream_responses(
    infer: InferCall, requests: AsyncIterator[pb.ModelInferRequest], strict: bool
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """Run the requests of a stream concurrently; yield their responses in request order, as Triton does.

    An error becomes an `error_message` response and the stream goes on, unless `strict` (the client sent
    `triton_grpc_error: true`), where the first error is raised to end the stream with its status.
    """
    started: asyncio.Queue[asyncio.Task[pb.ModelStreamInferResponse | _Failure] | None] = asyncio.Queue()
    running: set[asyncio.Task[pb.ModelStreamInferResponse | _Failure]] = set()

    async def one(message: pb.ModelInferRequest) -> pb.ModelStreamInferResponse | _Failure:
        try:
            return final_response(await infer(message))
        except NereidError as exc:
            return _Failure(exc, message.id)

    async def read() -> None:
        try:
            async for message in requests:
                task = asyncio.create_task(one(message))
                running.add(task)
                task.add_done_callback(running.discard)
                started.put_nowait(task)
        finally:
            started.put_nowait(None)  # the end

    reader = asyncio.create_task(read())
    try:
        while (task := await started.get()) is not None:
            item = await task
            if isinstance(item, _Failure):
                if strict:
                    raise item.error
                yield error_response(item.error.message, item.request_id)
            else:
                yield item
        await reader  # a failure to read the stream ends the RPC with it
    finally:
        # The client went away or the stream failed: cancel what still runs, so the engine drops it.
        reader.cancel()
        for task in list(running):
            task.cancel()
