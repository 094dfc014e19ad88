"""A decoupled ensemble's run: every response of a step flows on to the steps after it (Triton's rule).

An ensemble is decoupled when one of its steps is (nereid.repository.ensemble_flow). Then each ensemble
tensor holds a value per *iteration*: the n-th value a step made for it. A step runs once for each
iteration at which all its inputs exist, and the ensemble sends a response whenever all the requested
outputs exist at one iteration. As in Triton, a tensor's iteration counts the values made for it in the
order they arrive, whatever iteration the step's own inputs had; the load-time check that no step mixes
tensors of different decoupled origins keeps these counts aligned.

Responses go out in the order their last step finished, not in the order the decoupled step sent its
responses. The final flag rides on the response made when no step is left in flight, or goes alone when
that moment made none (a decoupled step's flags-only final response, or one that sent nothing). The
first error, from a step or a step's response, ends the ensemble's request with that error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from nereid.backends.base import BackendRequest, Outputs
from nereid.errors import InternalError, NereidError
from nereid.types import InferRequest, InferTensor, StreamEvent

if TYPE_CHECKING:
    from nereid.scheduling.ensemble import EnsembleStep

# What a step's run reports: one of its stream events, or the exception that ended it.
_Report = tuple["EnsembleStep", StreamEvent | BaseException]
# (tensor, iteration)
_Value = tuple[str, int]


@dataclass
class _Tensor:
    """One ensemble tensor's values by iteration; None marks a value that was not made (an optional
    input the request left out, an output a step did not send)."""

    uses: int  # how many times each value is read: its consuming steps, and the response when requested
    values: dict[int, np.ndarray | None] = field(default_factory=dict)
    batches: dict[int, int] = field(default_factory=dict)
    remaining: dict[int, int] = field(default_factory=dict)
    next_iteration: int = 0

    def add(self, array: np.ndarray | None, batch: int) -> int:
        iteration = self.next_iteration
        self.next_iteration += 1
        self.values[iteration] = array
        self.batches[iteration] = batch
        self.remaining[iteration] = self.uses
        return iteration

    def read(self, iteration: int) -> tuple[np.ndarray | None, int]:
        value, batch = self.values[iteration], self.batches[iteration]
        self.remaining[iteration] -= 1
        if self.remaining[iteration] <= 0:  # nothing will read it again: free it
            del self.values[iteration], self.batches[iteration], self.remaining[iteration]
        return value, batch


StepRequest = Callable[["EnsembleStep", Mapping[str, np.ndarray], Mapping[str, int]], InferRequest]
StepStream = Callable[[InferRequest], AsyncGenerator[StreamEvent, None]]
StepError = Callable[[NereidError], NereidError]
EnsembleOutput = Callable[[str, np.ndarray, int], np.ndarray]


class EnsembleStreamRun:
    """One request to a decoupled ensemble; `run` puts the ensemble's responses into `request.stream`."""

    def __init__(
        self,
        steps: Iterable[EnsembleStep],
        request: BackendRequest,
        inputs: Iterable[str],
        batch_of: Callable[[np.ndarray], int],
        step_request: StepRequest,
        step_stream: StepStream,
        step_error: StepError,
        output: EnsembleOutput,
    ) -> None:
        if request.stream is None:
            raise InternalError("a decoupled ensemble was run without a response stream")
        self._stream = request.stream
        self._steps = list(steps)
        self._outputs = tuple(request.outputs)
        self._step_request = step_request
        self._step_stream = step_stream
        self._step_error = step_error
        self._output = output
        self._batch_of = batch_of
        self._consumers: dict[str, list[int]] = {}
        for index, step in enumerate(self._steps):
            for tensor in dict.fromkeys(step.input_map.values()):
                self._consumers.setdefault(tensor, []).append(index)
        self._tensors: dict[str, _Tensor] = {}
        self._reports: asyncio.Queue[_Report] = asyncio.Queue()
        self._running: set[asyncio.Task[None]] = set()
        self._in_flight = 0  # steps whose final response has not come yet (Triton's in-flight counter)
        self._initial = [(name, request.inputs.get(name)) for name in inputs]

    def _tensor(self, name: str) -> _Tensor:
        tensor = self._tensors.get(name)
        if tensor is None:
            uses = len(self._consumers.get(name, ())) + (name in self._outputs)
            tensor = self._tensors[name] = _Tensor(uses)
        return tensor

    async def run(self) -> Outputs:
        try:
            updated = {
                (name, self._tensor(name).add(array, self._batch(array))) for name, array in self._initial
            }
            self._respond(self._advance(updated))
            while self._in_flight:
                step, report = await self._reports.get()
                if isinstance(report, NereidError):
                    raise self._step_error(report)
                if isinstance(report, BaseException):
                    raise report
                if report.error is not None:  # an error response ends the ensemble's request, as in Triton
                    raise self._step_error(report.error)
                if report.final:
                    self._in_flight -= 1
                made = self._store(step, report.response.outputs) if report.response is not None else set()
                self._respond(self._advance(made))
        finally:
            for task in self._running:
                task.cancel()
            if self._running:
                await asyncio.wait(self._running)
        return {}

    def _batch(self, array: np.ndarray | None) -> int:
        return 0 if array is None else self._batch_of(array)

    def _respond(self, responses: list[Outputs]) -> None:
        """Send what this moment made; the final flag goes on the last, or alone when nothing is left."""
        final = self._in_flight == 0
        for index, outputs in enumerate(responses):
            self._stream.put(outputs, final and index == len(responses) - 1)
        if final and not responses:
            self._stream.put(None, True)

    def _store(self, step: EnsembleStep, outputs: Iterable[InferTensor]) -> set[_Value]:
        produced = {tensor.name: tensor.data for tensor in outputs}
        made = set()
        for output, name in step.output_map.items():
            array = produced.get(output)
            batch = self._batch_of(array) if step.batching and array is not None else 0
            made.add((name, self._tensor(name).add(array, batch)))
        return made

    def _advance(self, updated: set[_Value]) -> list[Outputs]:
        """Start the steps that `updated` completes, and collect the responses it completes. A step
        that lacks a required input makes no outputs (its outputs are marked missing at once)."""
        responses: list[Outputs] = []
        while updated:
            ready = sorted({(i, it) for name, it in updated for i in self._consumers.get(name, ())})
            iterations = sorted({it for name, it in updated if name in self._outputs})
            for iteration in iterations:
                outputs = self._response(iteration)
                if outputs is not None:
                    responses.append(outputs)
            updated = set()
            for index, iteration in ready:
                step = self._steps[index]
                if not all(iteration in self._tensor(t).values for t in step.input_map.values()):
                    continue
                values = {t: self._tensor(t).read(iteration) for t in dict.fromkeys(step.input_map.values())}
                missing = any(
                    values[t][0] is None and name not in step.optional_inputs
                    for name, t in step.input_map.items()
                )
                if missing:
                    updated |= {(t, self._tensor(t).add(None, 0)) for t in step.output_map.values()}
                    continue
                arrays = {t: value for t, (value, _) in values.items() if value is not None}
                batches = {t: batch for t, (value, batch) in values.items() if value is not None}
                self._start(step, self._step_request(step, arrays, batches))
        return responses

    def _response(self, iteration: int) -> Outputs | None:
        if not all(iteration in self._tensor(name).values for name in self._outputs):
            return None
        outputs = {}
        for name in self._outputs:
            array, batch = self._tensor(name).read(iteration)
            if array is not None:  # as in Triton, an output no step made is left out
                outputs[name] = self._output(name, array, batch)
        return outputs

    def _start(self, step: EnsembleStep, member: InferRequest) -> None:
        self._in_flight += 1
        task = asyncio.ensure_future(self._drive(step, member))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _drive(self, step: EnsembleStep, member: InferRequest) -> None:
        final = False
        try:
            async for event in self._step_stream(member):
                final = event.final
                self._reports.put_nowait((step, event))
            if not final:  # a stream always ends with the final flag; never wait for one that cannot come
                self._reports.put_nowait(
                    (step, InternalError(f"model '{step.model_name}' ended its stream early"))
                )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to `run`, which fails the request with it
            self._reports.put_nowait((step, exc))
        finally:
            if member.trace is not None:
                member.trace.close()
