"""The protocol-neutral core: every frontend calls these methods (the EngineClient protocol) and nothing
below them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from nereid import TRITON_PROTOCOL_VERSION
from nereid.cache import create_cache
from nereid.core.engine_client import (
    CudaSharedMemoryRegion,
    ModelMetadata,
    ModelMetrics,
    RepositoryIndexEntry,
    ServerMetadata,
    SystemSharedMemoryRegion,
    TensorMetadata,
)
from nereid.core.queued_infer import QueuedCachedInfer, QueuedSchedulerInfer, answer_of
from nereid.core.streaming import stream_decoupled
from nereid.errors import DecoupledModel, InvalidArgument, Unavailable
from nereid.log_settings import LogSettings, ServerLog
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from nereid.shared_memory import SharedMemoryRegistry
from nereid.tracing import SettingAnswer, SettingUpdate, TraceManager
from nereid.types import InferRequest, InferResponse, StreamEvent

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
    "trace",
    "logging",
)


class Engine:
    def __init__(self, settings: ServerSettings, models: ModelManager, log: ServerLog | None = None) -> None:
        self._settings = settings
        self.models = models
        # the server's log, whose settings the logging extension reads and changes
        self.log = log if log is not None else ServerLog(settings.log, settings.log_escape)
        self.shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
        # for models whose config enables `response_cache`; None without --cache-config
        self._cache = create_cache(settings.response_cache) if settings.response_cache else None
        self.tracer = TraceManager(settings.trace)
        self._live = True

    # health and metadata
    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not self._live:
            return False
        return self.models.all_ready() if self._settings.strict_readiness else True

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(self._settings.server_id, TRITON_PROTOCOL_VERSION, EXTENSIONS)

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        model = self.models.get(name, version)
        metadata = model.metadata
        return ModelMetadata(
            metadata["name"],
            tuple(metadata["versions"]),
            metadata["platform"],
            tuple(TensorMetadata(t["name"], t["datatype"], tuple(t["shape"])) for t in metadata["inputs"]),
            tuple(TensorMetadata(t["name"], t["datatype"], tuple(t["shape"])) for t in metadata["outputs"]),
            model.max_batch_size,
        )

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self.models.get(name, version).decoupled

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

    def repository_index(self, ready_only: bool = False) -> list[RepositoryIndexEntry]:
        return [RepositoryIndexEntry(**row) for row in self.models.index(ready_only)]

    # inference
    async def infer(self, request: InferRequest) -> InferResponse:
        """`infer_queued`, awaited."""
        return await answer_of(self.infer_queued(request))

    def infer_queued(self, request: InferRequest) -> QueuedSchedulerInfer | QueuedCachedInfer:
        """The request admitted (counted in flight, its shared-memory regions held, checked) and handed to
        its model's scheduler now, its answer to come by callback. A decoupled model streams instead."""
        model = self.models.get(request.model_name, request.model_version, request.model_namespace)
        if model.decoupled:
            raise DecoupledModel()
        if model.response_cache and self._cache is not None:
            return QueuedCachedInfer(model, request, self.shared_memory, self._cache)
        return QueuedSchedulerInfer(model, request, self.shared_memory, model.scheduler)

    async def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
        """Any number of responses (decoupled models, see nereid.core.streaming); one, final, for the others."""
        model = self.models.get(request.model_name, request.model_version, request.model_namespace)
        if not model.decoupled:
            yield StreamEvent(await self.infer(request))
            return
        events = stream_decoupled(model, request)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()  # at once, when the consumer stops early: the model sees the cancellation

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension's answer: every loaded version, or the one (or ones) asked for."""
        if not name:
            models = self.models.loaded()
        elif version:
            models = [self.models.get_for_statistics(name, version)]
        else:
            models = self.models.loaded(name)
        return {"model_stats": [m.statistics.to_json(m.name, m.version_text) for m in models]}

    def model_metrics(self) -> list[ModelMetrics]:
        return [
            ModelMetrics(
                m.name,
                m.version_text,
                dict(m.config.metric_tags),
                m.max_batch_size,
                m.scheduler.pending(),
                m.statistics,
                m.response_cache and self._cache is not None,
                m.load_duration_s,
            )
            for m in self.models.loaded()
        ]

    # logging extension
    def log_settings(self) -> LogSettings:
        return self.log.settings

    def update_log_settings(self, values: dict[str, Any], typed: bool = False) -> LogSettings:
        return self.log.update(values, typed)

    # trace extension
    def trace_setting(self, model_name: str = "", update: SettingUpdate | None = None) -> SettingAnswer:
        """The trace setting of `model_name` ("": the global one), after `update` when given."""
        if model_name and not self.models.is_ready(model_name, ""):
            raise InvalidArgument(f"Request for unknown model : {model_name}")
        if update is not None:
            try:
                self.tracer.update(model_name, update)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
        return self.tracer.setting(model_name)

    # shared memory registry
    def system_shared_memory_status(self, name: str | None = None) -> list[SystemSharedMemoryRegion]:
        return [SystemSharedMemoryRegion(**region) for region in self.shared_memory.system_status(name)]

    def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register_system(name, key, offset, byte_size)

    def unregister_system_shared_memory(self, name: str | None = None) -> None:
        self.shared_memory.unregister_system(name)

    def cuda_shared_memory_status(self, name: str | None = None) -> list[CudaSharedMemoryRegion]:
        return [CudaSharedMemoryRegion(**region) for region in self.shared_memory.cuda_status(name)]

    def register_cuda_shared_memory(self, name: str, raw_handle: str, device_id: int, byte_size: int) -> None:
        self.shared_memory.register_cuda(name, raw_handle, device_id, byte_size)

    def unregister_cuda_shared_memory(self, name: str | None = None) -> None:
        self.shared_memory.unregister_cuda(name)

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
        self.tracer.close()  # after the models: the traces of the last requests are written too
        self.shared_memory.close()
        if self._cache is not None:
            self._cache.close()
