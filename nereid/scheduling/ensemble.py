"""The ensemble scheduler: runs an ensemble's steps as a DAG over named tensors.

An ensemble has no instances. Each step is an ordinary inference request to a composing model, made
through the engine, so it goes through that model's own scheduler (batching happens per step), counts
as a request in flight of that model (a reload drains it) and in that model's statistics. A step
starts as soon as its input tensors exist, so independent steps run at the same time. Tensors stay
numpy arrays in this process between steps.

An ensemble with a decoupled step is decoupled itself (Triton's rule): each response of that step
continues the rest of the DAG as a flow of its own, and each flow that completes is one response of the
ensemble. The first error ends the request: flows already running finish (their responses are sent),
no new one starts, and the error is the final response. `max_inflight_requests` bounds the flows a
decoupled step's responses keep in flight, across all requests to the ensemble: its next responses wait
for one of them to finish (backpressure instead of unbounded memory).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, Outputs
from nereid.backends.responses import ResponseStream
from nereid.datatypes import wire_datatype
from nereid.errors import InternalError, NereidError, QueueFull, unexpected
from nereid.scheduling.base import Done, TaskEntry
from nereid.scheduling.ensemble_shapes import reshape_for
from nereid.statistics import ModelStatistics, RequestTiming
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

if TYPE_CHECKING:
    from nereid.core.engine_client import ModelServices
    from nereid.repository.model import ModelVersion

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnsembleMembers:
    """How ensembles reach their composing models: `lookup` (the model manager's) finds a loaded
    version, `server` (the engine, given to the model manager when it starts) runs a request.
    `namespace`: the ensemble's repository, whose models its steps prefer (--model-namespacing)."""

    lookup: Callable[[str, str], ModelVersion]
    server: ModelServices | None = None
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    model_name: str
    model_version: str  # "" for the latest (model_version -1)
    input_map: Mapping[str, str]  # the model's input -> ensemble tensor
    output_map: Mapping[str, str]  # the model's output -> ensemble tensor
    batching: bool = False  # the model's max_batch_size > 0
    input_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # the model's input dims
    optional_inputs: frozenset[str] = frozenset()  # the model's inputs that a request may leave out
    decoupled: bool = False  # the model sends any number of responses per request


def ensemble_steps(config: mc.ModelConfig, models: list[mc.ModelConfig]) -> tuple[EnsembleStep, ...]:
    """The steps, given each step's model config: outputs are asked for in that model's order, so
    that they come back, and fill the ensemble's tensors, in a fixed order (a map's order is not)."""
    steps = []
    for step, model in zip(config.ensemble_scheduling.step, models, strict=True):
        order = {output.name: index for index, output in enumerate(model.output)}
        outputs = sorted(step.output_map.items(), key=lambda item: order.get(item[0], len(order)))
        version = "" if step.model_version < 0 else str(step.model_version)
        dims = {tensor.name: tuple(tensor.dims) for tensor in model.input}
        optional = frozenset(tensor.name for tensor in model.input if tensor.optional)
        steps.append(
            EnsembleStep(
                step.model_name,
                version,
                dict(step.input_map),
                dict(outputs),
                model.max_batch_size > 0,
                dims,
                optional,
                model.model_transaction_policy.decoupled,
            )
        )
    return tuple(steps)


class EnsembleScheduler:
    def __init__(
        self,
        name: str,
        steps: tuple[EnsembleStep, ...],
        members: EnsembleMembers,
        config: mc.ModelConfig | None = None,
        statistics: ModelStatistics | None = None,
    ) -> None:
        self._name = name
        self._statistics = statistics  # the ensemble's own
        self._steps = steps
        self._members = members
        self._batching = config is not None and config.max_batch_size > 0
        self._output_dims = {o.name: tuple(o.dims) for o in config.output} if config is not None else {}
        self._needed: dict[tuple[str, ...], tuple[EnsembleStep, ...]] = {}
        self._max_inflight = config.ensemble_scheduling.max_inflight_requests if config is not None else 0
        self._slots: dict[int, asyncio.Semaphore] = {}  # by id() of the decoupled step
        if self._max_inflight:
            log.info(
                "Ensemble model '%s' configured with max_inflight_requests: %d", name, self._max_inflight
            )

    def enqueue(self, request: BackendRequest, timing: RequestTiming | None, done: Done) -> TaskEntry:
        """The Scheduler primitive: the steps run as a Task, which answers `done`."""
        return TaskEntry(self.execute(request, timing), done)

    def withdraw(self, entry: TaskEntry) -> None:
        entry.withdraw()

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        start = time.perf_counter_ns()
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        # each tensor's batch size, as ensemble_shapes uses it (0: made without batching)
        batches = {name: _batch(array, self._batching) for name, array in tensors.items()}
        waiting = self._needed_steps(tuple(request.outputs))
        if request.stream is not None:
            await self._execute_flows(request, request.stream, tensors, batches, waiting)
            outputs: Outputs = {}
        else:
            await self._advance(tensors, batches, waiting, request, None)
            outputs = self._outputs(request, tensors, batches)
        if timing is not None:
            timing.infer_ns = time.perf_counter_ns() - start
        return outputs

    async def _advance(
        self,
        tensors: dict[str, np.ndarray],
        batches: dict[str, int],
        waiting: list[EnsembleStep],
        request: BackendRequest,
        flows: _Flows | None,
    ) -> bool:
        """Run the waiting steps as their inputs appear; True once none is left. With `flows` (a decoupled
        ensemble), a decoupled step starts once nothing else of this flow runs, and its responses carry on
        as flows of their own: False, this one is done."""
        running: dict[asyncio.Task[InferResponse], EnsembleStep] = {}
        try:
            while True:
                ready = _ready(waiting, running.values())
                skipped = [s for s in ready if not _runnable(s, tensors)]
                for step in skipped:  # a required input was never made: its outputs will not be either
                    waiting.remove(step)
                    ready.remove(step)
                if skipped and not ready:
                    continue
                if flows is not None:
                    streamed = [s for s in ready if s.decoupled]
                    if streamed:
                        ready = [s for s in ready if not s.decoupled]
                        if not ready and not running:
                            waiting.remove(streamed[0])
                            await self._fan_out(streamed[0], tensors, batches, waiting, request, flows)
                            return False
                if len(ready) == 1 and not running:  # a chain: no task needed to wait for one step
                    waiting.remove(ready[0])
                    response = await self._run_step(ready[0], tensors, batches, request)
                    _store(ready[0], response, tensors, batches)
                    continue
                for step in ready:
                    waiting.remove(step)
                    task = asyncio.ensure_future(self._run_step(step, tensors, batches, request))
                    running[task] = step
                if not running:
                    return True
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    # a failed step fails the request; `finally` stops the rest
                    _store(step, task.result(), tensors, batches)
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)

    def _outputs(
        self, request: BackendRequest, tensors: Mapping[str, np.ndarray], batches: Mapping[str, int]
    ) -> Outputs:
        for name in request.outputs:
            if name not in tensors:  # as in Triton, the response leaves it out
                log.debug("ensemble '%s': Composing models did not output tensor %s", self._name, name)
        return {
            name: self._as_output(name, tensors[name], batches[name])
            for name in request.outputs
            if name in tensors
        }

    async def _execute_flows(
        self,
        request: BackendRequest,
        stream: ResponseStream,
        tensors: dict[str, np.ndarray],
        batches: dict[str, int],
        waiting: list[EnsembleStep],
    ) -> None:
        """A decoupled ensemble's request: its responses and at last the final flag (or its error) go to
        `stream`. The client going away cancels every flow."""
        flows = _Flows(stream)
        task = asyncio.current_task()
        if task is not None:

            def cancel() -> None:  # the client went away: every flow stops
                task.cancel()

            stream.on_cancel(cancel)
        try:
            flows.spawn(self._flow(tensors, batches, waiting, request, flows, None))
            await flows.drain()
        finally:
            flows.cancel()
        flows.finish()

    async def _flow(
        self,
        tensors: dict[str, np.ndarray],
        batches: dict[str, int],
        waiting: list[EnsembleStep],
        request: BackendRequest,
        flows: _Flows,
        slot: asyncio.Semaphore | None,
    ) -> None:
        try:
            if await self._advance(tensors, batches, waiting, request, flows):
                flows.respond(self._outputs(request, tensors, batches))
        finally:
            if slot is not None:
                slot.release()

    async def _fan_out(
        self,
        step: EnsembleStep,
        tensors: Mapping[str, np.ndarray],
        batches: Mapping[str, int],
        waiting: list[EnsembleStep],
        request: BackendRequest,
        flows: _Flows,
    ) -> None:
        """Run a decoupled step; each of its responses continues the remaining steps as a new flow."""
        server = self._server()
        slot = self._slot(step)
        started = time.perf_counter_ns()
        member = self._member_request(step, tensors, batches, request, self._members.namespace)
        events = server.infer_stream(member)
        try:
            async for event in events:
                if flows.error is not None:
                    break  # the request failed elsewhere: no new flows
                if event.error is not None:
                    flows.fail(self._step_failed(event.error, started))
                    break
                if event.response is None:
                    continue  # the final flag alone
                child_tensors, child_batches = dict(tensors), dict(batches)
                _store(step, event.response, child_tensors, child_batches)
                if not waiting:  # nothing after this step: the response goes out now, as the step sent it
                    flows.respond(self._outputs(request, child_tensors, child_batches), final=False)
                    continue
                if slot is not None:
                    await slot.acquire()  # backpressure: the step's next response waits for room
                flows.spawn(self._flow(child_tensors, child_batches, list(waiting), request, flows, slot))
        except NereidError as exc:
            raise self._step_failed(exc, started) from None
        finally:
            await events.aclose()
            if member.trace is not None:
                member.trace.close()

    def _slot(self, step: EnsembleStep) -> asyncio.Semaphore | None:
        """The bound shared by the flows of `step`'s responses, across requests (None: unbounded)."""
        if not self._max_inflight:
            return None
        slot = self._slots.get(id(step))
        if slot is None:
            slot = self._slots[id(step)] = asyncio.Semaphore(self._max_inflight)
        return slot

    def _needed_steps(self, outputs: tuple[str, ...]) -> list[EnsembleStep]:
        """The steps that contribute to the requested outputs; Triton runs no others."""
        needed = self._needed.get(outputs)
        if needed is None:
            needed = needed_steps(self._steps, outputs)
            if len(self._needed) < 64:  # requests name few distinct output sets
                self._needed[outputs] = needed
        return list(needed)

    def _as_output(self, name: str, array: np.ndarray, batch: int) -> np.ndarray:
        dims = self._output_dims.get(name)
        if dims is None:
            return array
        shape = reshape_for(dims, self._batching, batch, array.shape)
        return array if shape == array.shape else array.reshape(shape)

    async def _run_step(
        self,
        step: EnsembleStep,
        tensors: Mapping[str, np.ndarray],
        batches: Mapping[str, int],
        request: BackendRequest,
    ) -> InferResponse:
        server = self._server()
        started = time.perf_counter_ns()
        member = self._member_request(step, tensors, batches, request, self._members.namespace)
        try:
            return await server.infer(member)
        except NereidError as exc:
            raise self._step_failed(exc, started) from None
        finally:
            if member.trace is not None:
                member.trace.close()

    def _server(self) -> ModelServices:
        server = self._members.server
        if server is None:
            raise InternalError(f"ensemble '{self._name}' is not connected to an engine")
        return server

    def _step_failed(self, exc: NereidError, started_ns: int) -> NereidError:
        """A composing request failed: as in Triton, it counts among the ensemble's failures too (reason
        OTHER), besides the ensemble request it fails; a request its queue refused counts nowhere. The
        error, in Triton's wording; its status stays the composing model's."""
        if self._statistics is not None and not isinstance(exc, QueueFull):
            self._statistics.record_failure(time.perf_counter_ns() - started_ns, "OTHER")
        return type(exc)(f"in ensemble '{self._name}', {exc.message}")

    @staticmethod
    def _member_request(
        step: EnsembleStep,
        tensors: Mapping[str, np.ndarray],
        batches: Mapping[str, int],
        request: BackendRequest,
        namespace: str = "",
    ) -> InferRequest:
        inputs = []
        for name, tensor in step.input_map.items():
            if tensor not in tensors:
                continue  # an optional input that the request or an earlier step left out
            array = tensors[tensor]
            dims = step.input_dims.get(name)
            if dims is not None:
                shape = reshape_for(dims, step.batching, batches[tensor], array.shape)
                array = array if shape == array.shape else array.reshape(shape)
            inputs.append(InferTensor(name, wire_datatype(array.dtype), array.shape, array))
        outputs = [RequestedOutput(name) for name in step.output_map]
        # Each step carries the ensemble request's parameters and controls, its priority included (as Triton).
        member = InferRequest(
            step.model_name,
            step.model_version,
            inputs,
            outputs,
            request.id,
            dict(request.parameters),
            request.correlation_id,
            request.flags,
            request.priority,
            request.timeout_us,
            model_namespace=namespace,
        )
        if request.trace is not None:  # each step is traced as a child of the ensemble's request
            member.trace = request.trace.child()
        return member

    def pending(self) -> int:
        return 0

    def refuse_new_sequences(self) -> None:
        """Its steps' sequence models refuse them themselves."""

    def waiting_sequences(self) -> int:
        return 0  # counted by the composing models that hold them

    def unavailable_reason(self) -> str | None:
        for step in self._steps:
            try:
                member = self._members.lookup(step.model_name, step.model_version)
            except NereidError as exc:
                return f"composing model '{step.model_name}' is not available: {exc.message}"
            reason = member.unavailable_reason()
            if reason is not None:
                return f"composing model '{step.model_name}' is not available: {reason}"
        return None

    async def model_ready(self) -> bool:
        return self.unavailable_reason() is None

    def stop(self) -> None:
        """Nothing to release: the composing models belong to the model manager."""


def needed_steps(steps: tuple[EnsembleStep, ...], outputs: Iterable[str]) -> tuple[EnsembleStep, ...]:
    """The steps that make `outputs`, directly or through the tensors their inputs need, in step order."""
    wanted = set(outputs)
    needed: set[int] = set()
    changed = True  # steps may be listed in any order, so sweep until nothing is added
    while changed:
        changed = False
        for index, step in enumerate(steps):
            if index not in needed and any(t in wanted for t in step.output_map.values()):
                needed.add(index)
                wanted.update(step.input_map.values())
                changed = True
    return tuple(step for index, step in enumerate(steps) if index in needed)


def _ready(waiting: list[EnsembleStep], running: Iterable[EnsembleStep]) -> list[EnsembleStep]:
    """The waiting steps none of whose inputs is still to come from a step that has not finished."""
    pending = {tensor for step in (*waiting, *running) for tensor in step.output_map.values()}
    return [s for s in waiting if not any(t in pending for t in s.input_map.values())]


def _runnable(step: EnsembleStep, tensors: Mapping[str, np.ndarray]) -> bool:
    """Every input that the step's model requires exists (optional ones may be absent)."""
    return all(tensor in tensors or name in step.optional_inputs for name, tensor in step.input_map.items())


def _batch(array: np.ndarray, batching: bool) -> int:
    return int(array.shape[0]) if batching and array.ndim else 0


def _store(
    step: EnsembleStep, response: InferResponse, tensors: dict[str, np.ndarray], batches: dict[str, int]
) -> None:
    """A step's outputs become the ensemble tensors its output map names, with the step's batch size."""
    produced = {tensor.name: tensor.data for tensor in response.outputs}
    for output, tensor in step.output_map.items():
        if output in produced:
            tensors[tensor] = produced[output]
            batches[tensor] = _batch(produced[output], step.batching)


class _Flows:
    """The flows of one decoupled ensemble request, and its first error. The response of the flow that
    ends last carries the final flag (clients wait for it); when the last flow to end makes none, the
    final flag goes alone."""

    def __init__(self, stream: ResponseStream) -> None:
        self._stream = stream
        self._tasks: set[asyncio.Task[None]] = set()
        self._live = 0  # flows started and not yet ended, a decoupled step's still streaming included
        self.error: NereidError | None = None

    def spawn(self, flow: Awaitable[None]) -> None:
        self._live += 1  # at once, so that a flow ending meanwhile does not think itself the last
        task = asyncio.ensure_future(self._run(flow))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, flow: Awaitable[None]) -> None:
        try:
            await flow
        except NereidError as exc:
            self.fail(exc)
        except Exception as exc:
            log.exception("ensemble flow failed")
            self.fail(unexpected(exc))
        finally:
            self._live -= 1

    def respond(self, outputs: Outputs, final: bool | None = None) -> None:
        """From a flow that ends: its response, final when no other flow is left (unless `final` says)."""
        if self.error is None:
            self._stream.put(outputs, self._live == 1 if final is None else final)

    def fail(self, error: NereidError) -> None:
        if self.error is None:
            self.error = error

    async def drain(self) -> None:
        """Until every flow is done; flows may start others meanwhile."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    def finish(self) -> None:
        """The error, or the final flag alone (nothing once a response carried it)."""
        self._stream.put(self.error, True)
