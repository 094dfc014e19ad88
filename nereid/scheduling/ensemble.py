"""The ensemble scheduler: runs an ensemble's steps as a DAG over named tensors.

An ensemble has no instances. Each step is an ordinary inference request to a composing model, made
through the engine, so it goes through that model's own scheduler (batching happens per step), counts
as a request in flight of that model (a reload drains it) and in that model's statistics. A step
starts as soon as its input tensors exist, so independent steps run at the same time. Tensors stay
numpy arrays in this process between steps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, Outputs
from nereid.datatypes import wire_datatype
from nereid.errors import InternalError, NereidError
from nereid.statistics import RequestTiming
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

if TYPE_CHECKING:
    from nereid.engine_client import ModelServices
    from nereid.repository.model import ModelVersion


@dataclass(frozen=True)
class EnsembleMembers:
    """How ensembles reach their composing models: `lookup` (the model manager's) finds a loaded
    version, `server` (the engine, given to the model manager when it starts) runs a request."""

    lookup: Callable[[str, str], ModelVersion]
    server: ModelServices | None = None


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    model_name: str
    model_version: str  # "" for the latest (model_version -1)
    input_map: Mapping[str, str]  # the model's input -> ensemble tensor
    output_map: Mapping[str, str]  # the model's output -> ensemble tensor


def ensemble_steps(config: mc.ModelConfig, models: list[mc.ModelConfig]) -> tuple[EnsembleStep, ...]:
    """The steps, given each step's model config: outputs are asked for in that model's order, so
    that they come back, and fill the ensemble's tensors, in a fixed order (a map's order is not)."""
    steps = []
    for step, model in zip(config.ensemble_scheduling.step, models, strict=True):
        order = {output.name: index for index, output in enumerate(model.output)}
        outputs = sorted(step.output_map.items(), key=lambda item: order.get(item[0], len(order)))
        version = "" if step.model_version < 0 else str(step.model_version)
        steps.append(EnsembleStep(step.model_name, version, dict(step.input_map), dict(outputs)))
    return tuple(steps)


class EnsembleScheduler:
    def __init__(self, name: str, steps: tuple[EnsembleStep, ...], members: EnsembleMembers) -> None:
        self._name = name
        self._steps = steps
        self._members = members

    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        start = time.perf_counter_ns()
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        waiting = list(self._steps)
        running: dict[asyncio.Task[InferResponse], EnsembleStep] = {}
        try:
            while True:
                ready = [s for s in waiting if all(t in tensors for t in s.input_map.values())]
                if len(ready) == 1 and not running:  # a chain: no task needed to wait for one step
                    waiting.remove(ready[0])
                    response = await self._run_step(ready[0], tensors, request)
                    _store(ready[0], response, tensors)
                    continue
                for step in ready:
                    waiting.remove(step)
                    task = asyncio.ensure_future(self._run_step(step, tensors, request))
                    running[task] = step
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    # a failed step fails the request; `finally` stops the rest
                    _store(step, task.result(), tensors)
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
        missing = [name for name in request.outputs if name not in tensors]
        if missing:
            raise InternalError(
                f"in ensemble '{self._name}', no step produced output(s) {', '.join(missing)}: "
                + (
                    "steps never ran for lack of their inputs: "
                    + ", ".join(f"'{s.model_name}'" for s in waiting)
                    if waiting
                    else "a composing model left them out of its response"
                )
            )
        if timing is not None:
            timing.infer_ns = time.perf_counter_ns() - start
        return {name: tensors[name] for name in request.outputs}

    async def _run_step(
        self,
        step: EnsembleStep,
        tensors: Mapping[str, np.ndarray],
        request: BackendRequest,
    ) -> InferResponse:
        server = self._members.server
        if server is None:
            raise InternalError(f"ensemble '{self._name}' is not connected to an engine")
        inputs = [
            InferTensor(name, wire_datatype(tensors[tensor].dtype), tensors[tensor].shape, tensors[tensor])
            for name, tensor in step.input_map.items()
        ]
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
        )
        try:
            return await server.infer(member)
        except NereidError as exc:
            # Triton's wording; the status stays the composing model's.
            raise type(exc)(f"in ensemble '{self._name}', {exc.message}") from None

    def pending(self) -> int:
        return 0

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


def _store(step: EnsembleStep, response: InferResponse, tensors: dict[str, np.ndarray]) -> None:
    """A step's outputs become the ensemble tensors its output map names."""
    produced = {tensor.name: tensor.data for tensor in response.outputs}
    for output, tensor in step.output_map.items():
        if output in produced:
            tensors[tensor] = produced[output]
