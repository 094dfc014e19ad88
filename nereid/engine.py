"""The protocol-neutral core: every frontend calls these methods and nothing below them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid import TRITON_PROTOCOL_VERSION
from nereid.backends import services
from nereid.classification import classify
from nereid.datatypes import tensor_from_bytes, tensor_to_bytes, wire_datatype
from nereid.errors import QueueFull, QueueTimeout, Unavailable
from nereid.repository import ModelManager, ModelVersion
from nereid.request_checks import (
    backend_inputs,
    backend_request,
    inputs_batch_size,
    request_prefix,
    requested_outputs,
)
from nereid.scheduling.ensemble import sequence_parameters
from nereid.settings import ServerSettings
from nereid.shared_memory import SharedMemoryRef, SharedMemoryRegistry, check_outputs_fit
from nereid.statistics import RequestTiming
from nereid.streaming import DecoupledModel, StreamEvent, infer_stream
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

# Extensions this server implements, named as Triton names them in server metadata.
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "statistics",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
)


class Engine:
    def __init__(self, settings: ServerSettings, models: ModelManager) -> None:
        self._settings = settings
        self.models = models
        self.shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
        models.members.infer = self.infer  # ensembles run their steps as requests of this engine
        self._live = True
        services.provide(self)  # for model code that calls back into the server (BLS)

    # health and metadata
    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not self._live:
            return False
        return self.models.all_ready() if self._settings.strict_readiness else True

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self._settings.server_id,
            "version": TRITON_PROTOCOL_VERSION,
            "extensions": list(EXTENSIONS),
        }

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return self.models.get(name, version).metadata

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Loaded, able to serve, and ready by the model's own check where it has one (Python `is_ready`)."""
        if not self.models.is_ready(name, version):
            return False
        return await self.models.get(name, version).scheduler.model_ready()

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self.models.get(name, version).config_json

    def model_config_message(self, name: str, version: str = "") -> mc.ModelConfig:
        """The completed `ModelConfig` message itself, as the gRPC frontend sends it."""
        return self.models.get(name, version).config

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self.models.index(ready_only)

    # inference
    async def infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter_ns()
        model = self.models.get(request.model_name, request.model_version)
        if model.decoupled:
            raise DecoupledModel()
        # Counted so that a reload or unload retires this version only once its requests are answered.
        model.inflight += 1
        try:
            for tensor in request.inputs:
                if tensor.shared_memory is not None:
                    self._read_shared_memory_inputs(model, request)
                    break
            inputs = backend_inputs(model, request)
            wanted = requested_outputs(model, request)
            in_regions = _output_regions(wanted) if request.outputs else None
            if in_regions:
                check_outputs_fit(self.shared_memory, in_regions)
            # Requests refused above never reach the model and, as in Triton, count in no statistic.
            timing = RequestTiming()
            queued = time.perf_counter_ns()
            try:
                results = await model.scheduler.execute(backend_request(request, inputs, wanted), timing)
                executed = time.perf_counter_ns()
                # A model may leave out a requested output (Python models can): Triton omits it too.
                outputs = [_output_tensor(model, o, results[o.name]) for o in wanted if o.name in results]
                if in_regions:
                    self._write_shared_memory_outputs(outputs, in_regions)
            except QueueFull:
                raise  # refused before it was queued: Triton counts it nowhere
            except BaseException as exc:
                model.statistics.record_failure(time.perf_counter_ns() - start, _failure_reason(exc))
                raise
            end = time.perf_counter_ns()
            if timing.batched:  # the batcher recorded the execution it shared with other requests
                model.statistics.record_batched_request(end - start, timing, queued - start, end - executed)
            else:  # an execution of its own
                model.statistics.record_request(
                    inputs_batch_size(model, request), end - start, timing, queued - start, end - executed
                )
        finally:
            model.request_done()
        if model.ensemble:
            return InferResponse(
                model.name, model.version_text, outputs, request.id, sequence_parameters(request.parameters)
            )
        return InferResponse(model.name, model.version_text, outputs, request.id)

    def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
        """Any number of responses (decoupled models); see nereid.streaming."""
        return infer_stream(self, request)

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension's answer: every loaded version, or the one (or ones) asked for."""
        if not name:
            models = self.models.loaded()
        elif version:
            models = [self.models.get_for_statistics(name, version)]
        else:
            models = self.models.loaded(name)
        return {"model_stats": [m.statistics.to_json(m.name, m.version_text) for m in models]}

    def _write_shared_memory_outputs(
        self, outputs: list[InferTensor], regions: dict[str, SharedMemoryRef]
    ) -> None:
        for tensor in outputs:
            if tensor.name in regions:
                tensor.shared_memory = regions[tensor.name]
                self.shared_memory.write(
                    tensor.shared_memory, tensor.name, tensor_to_bytes(tensor.data, tensor.datatype)
                )

    def _read_shared_memory_inputs(self, model: ModelVersion, request: InferRequest) -> None:
        for tensor in request.inputs:
            if tensor.shared_memory is not None:
                view = self.shared_memory.view(tensor.shared_memory)
                tensor.data = tensor_from_bytes(
                    view, tensor.datatype, tensor.shape, tensor.name, model.name, request_prefix(request.id)
                )

    # model control
    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (explicit mode): new versions serve once ready, old ones drain."""
        self._check_explicit()
        await asyncio.to_thread(self.models.load, name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload `name`; with `unload_dependents`, an ensemble's composing models too."""
        self._check_explicit()
        await asyncio.to_thread(self.models.unload, name, unload_dependents)

    def _check_explicit(self) -> None:
        if self.models.control_mode != "explicit":
            # Triton's text, whichever of 'none' or 'poll' is in force
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    def shutdown(self) -> None:
        self._live = False
        self.models.stop()
        self.shared_memory.close()


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELED"
    return "REJECTED" if isinstance(exc, QueueTimeout) else "BACKEND"


def _output_regions(wanted: Sequence[RequestedOutput]) -> dict[str, SharedMemoryRef]:
    return {o.name: o.shared_memory for o in wanted if o.shared_memory is not None}


def _output_tensor(model: ModelVersion, requested: RequestedOutput, array: np.ndarray) -> InferTensor:
    spec = model.outputs[requested.name]
    if spec.backend_dims is not None:
        array = array.reshape(((array.shape[0],) if model.max_batch_size > 0 else ()) + spec.dims)
    if requested.class_count > 0:
        array = classify(array, requested.class_count, spec.labels, model.max_batch_size > 0, requested.name)
        return InferTensor(requested.name, "BYTES", array.shape, array)
    if array.dtype != spec.numpy_dtype:
        # Triton answers with the data type the model produced, whatever the configuration says.
        return InferTensor(requested.name, wire_datatype(array.dtype), array.shape, array)
    return InferTensor(requested.name, spec.datatype, array.shape, array)
