"""A unary request to a dynamic batcher answered by callback: no coroutine and no Task per request.

`Engine.infer` awaits the batcher's future through several coroutines, each resumed when the batch is
done; for a model that takes microseconds that is a good share of a request's CPU. Here the request is
admitted and queued at once, and the batcher calls it back when its batch is done (no future, no callback
scheduled per request): that finishes it (statistics, tracing, release) and hands the response on. What
may wait for something else (the response cache, shared-memory regions held, decoupled models, other
schedulers) keeps the awaited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nereid.admission import Admission
from nereid.backends.base import BackendResult
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
        self._answer: Answer | None = None
        try:
            self._entry: QueuedRequest = batcher.enqueue(admission.backend, admission.timing, self._resolved)
        except BaseException as exc:
            admission.failed(exc)
            raise

    def then(self, callback: Answer) -> None:
        self._answer = callback  # the batcher answers on a later turn of the event loop, never before

    def cancel(self) -> None:
        entry = self._entry
        if entry.done is None:  # answered already
            return
        self._batcher.withdraw(entry)
        self._answer = None
        self._admission.failed(asyncio.CancelledError())

    def _resolved(self, result: BackendResult) -> None:
        answer = self._answer
        self._answer = None  # which refers back to this object: no cycle left for the garbage collector
        admission = self._admission
        if isinstance(result, BaseException):
            admission.failed(result)
            if answer is not None:
                answer(result)
            return
        try:
            outputs = admission.finish(result)  # which records a failure itself
        except Exception as exc:
            if answer is not None:
                answer(exc)
            return
        if answer is not None:
            answer(infer_response(self._model, self._request, outputs, getattr(result, "parameters", None)))


def infer_response(
    model: ModelVersion,
    request: InferRequest,
    outputs: list[InferTensor],
    parameters: dict[str, Any] | None = None,
) -> InferResponse:
    if model.ensemble:  # Triton echoes the sequence controls in an ensemble's response
        return InferResponse(
            model.name, model.version_text, outputs, request.id, request.sequence_parameters()
        )
    if parameters:  # the backend's own response parameters
        return InferResponse(model.name, model.version_text, outputs, request.id, parameters)
    return InferResponse(model.name, model.version_text, outputs, request.id)
