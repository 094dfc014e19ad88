"""Inference with any number of responses per request: a decoupled model's responses, as it sends them.

`stream_decoupled` yields StreamEvents: responses, errors (the stream goes on), and at last the final
flag, alone or with the last response. Errors found before the model runs (bad inputs) are raised, so
that frontends answer them as they answer `infer`. The request goes through the same admission as a
unary one (nereid.core.admission): counted in flight, checked, recorded in the statistics.

When the consumer stops early (the client went away, or a gRPC stream was cancelled), the request is
cancelled: the model sees `is_cancelled()` and should end its responses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from nereid.backends.responses import ResponseStream
from nereid.core.admission import Admission
from nereid.errors import DecoupledModel as DecoupledModel  # re-exported: its home was here
from nereid.errors import NereidError, unexpected
from nereid.repository.model import ModelVersion
from nereid.scheduling.base import Result
from nereid.types import InferRequest, InferResponse
from nereid.types import StreamEvent as StreamEvent  # re-exported: its home was here


async def stream_decoupled(model: ModelVersion, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
    """The responses of a decoupled `model` to `request`."""
    stream = ResponseStream(model.statistics.record_response)
    admission = Admission(model, request, stream=stream)
    try:
        execution = _Execution(stream)
        try:
            model.scheduler.enqueue(admission.backend, admission, execution.done)
        except (
            Exception
        ) as exc:  # refused by the scheduler: the stream ends with the error, as a failure would
            execution.done(exc)
        first = True
        error: NereidError | None = None  # an error that came with the final flag
        try:
            while True:
                result, final = await stream.get()
                if first and result is not None:
                    first = False
                    admission.responded()
                if isinstance(result, NereidError):
                    if final:
                        error = result
                    yield StreamEvent(None, result, final)
                elif result is None:
                    yield StreamEvent(None, None, final)
                else:
                    response = InferResponse(
                        model.name, model.version_text, admission.outputs(result), request.id
                    )
                    yield StreamEvent(response, None, final)
                if final:
                    break
        finally:
            # Recorded here, so that a consumer that stops at the final event (an ensemble whose request
            # failed elsewhere) still leaves the request counted.
            if not stream.finished:  # the consumer stopped early
                stream.cancel()
                admission.record_cancelled()
            else:
                # An ensemble's request that a step failed counts as failed, and only so, as in Triton. A
                # decoupled ensemble streams its error with the final flag and returns, so the flag tells.
                failure = (execution.error or error) if model.ensemble else None
                if failure is not None:
                    admission.record_stream_failed(failure)
                else:
                    admission.record_streamed()
    finally:
        admission.release()


class _Execution:
    """The scheduler's answer to a streamed request: when it is an error, so is the request's end, with
    whatever the model sent before."""

    __slots__ = ("_stream", "error")

    def __init__(self, stream: ResponseStream) -> None:
        self._stream = stream
        self.error: BaseException | None = None

    def done(self, result: Result) -> None:
        if isinstance(result, asyncio.CancelledError):
            self._stream.cancel()
        elif isinstance(result, BaseException):
            self.error = result
            self._stream.put(
                result if isinstance(result, NereidError) else unexpected(Exception(result)), True
            )
