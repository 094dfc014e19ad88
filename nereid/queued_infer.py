"""A unary request to a dynamic batcher answered by callback: no coroutine and no Task per request.

`Engine.infer` awaits the batcher's future through several coroutines, each resumed when the batch is
done; for a model that takes microseconds that is a good share of a request's CPU. Here the request is
admitted and queued at once, and the future's one callback finishes it (statistics, tracing, release) and
hands the response on. What may wait for something else (the response cache, shared-memory regions held,
decoupled models, other schedulers) keeps the awaited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nereid.admission import Admission
from nereid.backends.base import Outputs
from nereid.repository.model import ModelVersion
from nereid.scheduling.dynamic import DynamicBatcher, QueuedRequest
from nereid.types import InferRequest, InferResponse, InferTensor

Answer = Callable[[InferResponse | BaseException], None]


class QueuedBatcherInfer:
    """The QueuedInfer of a request in a dynamic batcher's queue."""

    __slots__ = ("_model", "_request", "_admission", "_batcher", "_entry", "_answer")

    def __init__(
        self, model: ModelVersion, request: InferRequest, admission: Admission, batcher: DynamicBatcher
    ) -> None:
        self._model = model
        self._request = request
        self._admission = admission
        self._batcher = batcher
        try:
            self._entry: QueuedRequest = batcher.enqueue(admission.backend, admission.timing)
        except BaseException as exc:
            admission.failed(exc)
            raise
        self._answer: Answer | None = None

    def then(self, callback: Answer) -> None:
        self._answer = callback
        self._entry.future.add_done_callback(self._resolved)

    def cancel(self) -> None:
        self._batcher.withdraw(self._entry)
        self._entry.future.cancel()

    def _resolved(self, future: asyncio.Future[Outputs]) -> None:
        answer = self._answer
        assert answer is not None
        self._answer = None  # which refers back to this object: no cycle left for the garbage collector
        admission = self._admission
        if future.cancelled():
            cancelled = asyncio.CancelledError()
            admission.failed(cancelled)
            answer(cancelled)
            return
        error = future.exception()
        if error is not None:
            admission.failed(error)
            answer(error)
            return
        try:
            outputs = admission.finish(future.result())  # which records a failure itself
        except Exception as exc:
            answer(exc)
            return
        answer(infer_response(self._model, self._request, outputs))


def infer_response(model: ModelVersion, request: InferRequest, outputs: list[InferTensor]) -> InferResponse:
    if model.ensemble:  # Triton echoes the sequence controls in an ensemble's response
        return InferResponse(
            model.name, model.version_text, outputs, request.id, request.sequence_parameters()
        )
    return InferResponse(model.name, model.version_text, outputs, request.id)
