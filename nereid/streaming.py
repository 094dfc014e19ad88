"""Inference with any number of responses per request: decoupled models, for every streaming frontend.

`infer_stream` yields StreamEvents. A model that is not decoupled gives one, final, through the engine's
ordinary path. A decoupled model gives what it sends, as it sends it: responses, errors (the stream goes
on), and at last the final flag, alone or with the last response. Errors found before the model runs
(unknown model, bad inputs) are raised, so that frontends answer them as they answer `infer`.

When the consumer stops early (the client went away, or a gRPC stream was cancelled), the request is
cancelled: the model sees `is_cancelled()` and should end its responses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nereid.backends.base import Outputs
from nereid.backends.responses import ResponseStream
from nereid.errors import InvalidArgument, NereidError, Unsupported, unexpected
from nereid.request_checks import backend_inputs, backend_request, inputs_batch_size, requested_outputs
from nereid.statistics import RequestTiming
from nereid.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from nereid.engine import Engine


@dataclass(slots=True)
class StreamEvent:
    response: InferResponse | None  # None with `final` and no error: the final flag alone
    error: NereidError | None = None
    final: bool = True


class DecoupledModel(Unsupported):
    """A decoupled model asked for exactly one response; frontends answer with Triton's text for it."""

    def __init__(self, endpoint: str = "this endpoint") -> None:
        super().__init__(f"{endpoint} doesn't support models with decoupled transaction policy")


async def infer_stream(engine: Engine, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
    model = engine.models.get(request.model_name, request.model_version)
    if not model.decoupled:
        yield StreamEvent(await engine.infer(request))
        return
    from nereid.engine import _output_tensor  # the engine imports this module

    start = time.perf_counter_ns()
    model.inflight += 1
    stream = ResponseStream()
    try:
        if any(t.shared_memory is not None for t in request.inputs) or any(
            o.shared_memory is not None for o in request.outputs or ()
        ):
            raise InvalidArgument(
                f"model '{model.name}' is decoupled: its inputs and outputs cannot be in shared memory"
            )
        inputs = backend_inputs(model, request)
        wanted = requested_outputs(model, request)
        backend = backend_request(request, inputs, wanted)
        backend.stream = stream
        timing = RequestTiming()
        execution = asyncio.ensure_future(model.scheduler.execute(backend, timing))
        execution.add_done_callback(lambda done: _executed(done, stream))
        try:
            while True:
                result, final = await stream.get()
                if isinstance(result, NereidError):
                    yield StreamEvent(None, result, final)
                elif result is None:
                    yield StreamEvent(None, None, final)
                else:
                    outputs = [_output_tensor(model, o, result[o.name]) for o in wanted if o.name in result]
                    yield StreamEvent(
                        InferResponse(model.name, model.version_text, outputs, request.id), None, final
                    )
                if final:
                    break
        finally:
            if not stream.finished:  # the consumer stopped early
                stream.cancel()
                model.statistics.record_failure(time.perf_counter_ns() - start, "CANCELED")
        model.statistics.record_request(
            inputs_batch_size(model, request), time.perf_counter_ns() - start, timing, 0, 0
        )
    finally:
        model.request_done()


def _executed(execution: asyncio.Future[Outputs], stream: ResponseStream) -> None:
    """execute returned; when it failed, so does the request, with whatever the model sent before."""
    if execution.cancelled():
        stream.cancel()
        return
    error = execution.exception()
    if error is not None:
        stream.put(error if isinstance(error, NereidError) else unexpected(Exception(error)), True)
