"""ModelStreamInfer: many requests in, their responses out in order, errors inside the stream."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tritonclient.grpc import service_pb2 as pb

from nereid.core.engine_client import EngineClient
from nereid.errors import NereidError
from nereid.frontends.grpc.codec import decode_infer_request, encode_infer_response
from nereid.frontends.grpc.undecodable import UNDECODABLE, unparsable
from nereid.tracing.trace import (
    GRPC_SEND_END,
    GRPC_SEND_START,
    GRPC_WAITREAD_END,
    GRPC_WAITREAD_START,
    INFER_RESPONSE_COMPLETE,
)
from nereid.types import InferRequest

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
    engine: EngineClient, message: pb.ModelInferRequest, forward: Callable[[InferRequest], None] | None = None
) -> AsyncIterator[pb.ModelStreamInferResponse | _Failure]:
    """The stream responses to one request: one for most models, any number for decoupled ones. A
    decoupled model's flags-only final response is sent only when the request asks for it
    (`triton_enable_empty_final_response`), as Triton does."""
    request = decode_infer_request(message)
    if forward is not None:  # request headers that become parameters
        forward(request)
    trace = None
    if engine.tracer.active:
        trace = request.trace = engine.tracer.sample(message.model_name)
        if trace is not None:  # the request was read off the stream just now
            trace.now(GRPC_WAITREAD_START)
            trace.now(GRPC_WAITREAD_END)
    try:
        async for event in engine.infer_stream(request):
            if trace is not None:
                trace.now(INFER_RESPONSE_COMPLETE)
                trace.now(GRPC_SEND_START)
            if event.error is not None:
                yield _Failure(event.error, message.id, event.final)
            elif event.response is not None:
                yield final_response(encode_infer_response(event.response), event.final)
            elif request.parameters.get(EMPTY_FINAL_KEY) is True:
                yield final_response(pb.ModelInferResponse(model_name=message.model_name, id=message.id))
    finally:
        if trace is not None:
            trace.now(GRPC_SEND_END)
            trace.close()


class _Slot:
    """An ordered request's responses, held until the requests before it are answered."""

    __slots__ = ("items", "done")

    def __init__(self) -> None:
        self.items: list[pb.ModelStreamInferResponse | _Failure] = []
        self.done = False


async def stream_responses(
    call: StreamCall,
    requests: AsyncIterator[pb.ModelInferRequest],
    strict: bool,
    decoupled: Callable[[pb.ModelInferRequest], bool] = lambda message: False,
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """Run the requests of a stream concurrently and yield their responses: in request order, as Triton
    does, except a decoupled model's, which go out as they come, as Triton sends them too.

    An error becomes an `error_message` response and the stream goes on, unless `strict` (the client sent
    `triton_grpc_error: true`), where the first error is raised to end the stream with its status.
    """
    out: asyncio.Queue[pb.ModelStreamInferResponse | _Failure | None] = asyncio.Queue()
    order: collections.deque[_Slot] = collections.deque()  # ordered requests not yet all sent
    running: set[asyncio.Task[None]] = set()
    reading = True

    def settle() -> None:
        while order and order[0].done:
            for item in order.popleft().items:
                out.put_nowait(item)
        if not reading and not running and not order:
            out.put_nowait(None)  # the end

    async def one(message: pb.ModelInferRequest, slot: _Slot | None) -> None:
        put = out.put_nowait if slot is None else slot.items.append
        try:
            async for item in call(message):
                put(item)
        except NereidError as exc:
            put(_Failure(exc, message.id))
        finally:
            if slot is not None:
                slot.done = True

    def finished(task: asyncio.Task[None]) -> None:
        running.discard(task)
        settle()

    async def read() -> None:
        nonlocal reading
        try:
            async for message in requests:
                if message is UNDECODABLE:  # ends the stream with Triton's answer to it (see below)
                    raise unparsable()
                slot = None if decoupled(message) else _Slot()
                if slot is not None:
                    order.append(slot)
                task = asyncio.create_task(one(message, slot))
                running.add(task)
                task.add_done_callback(finished)
        finally:
            reading = False
            settle()

    reader = asyncio.create_task(read())
    try:
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
