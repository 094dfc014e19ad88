"""What frontends, model code (BLS) and ensembles ask of the engine: a Protocol and the typed answers.

Frontends depend on `EngineClient`, never on the engine's internals (its model manager, its shared
memory registry), so that a frontend could talk to an engine in another process, or another serving
core replace one frontend, behind the same surface. Answers are frozen dataclasses in protocol-neutral
terms; each frontend writes them in its own wire form. The statistics extension's answer stays the JSON
document both protocols share (the gRPC frontend parses it into its message, whose field names it uses).

This module imports nothing of the engine, the repository or the backends, so any of them may use it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from nereid.types import InferRequest, InferResponse, StreamEvent

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

    from nereid.log_settings import LogSettings
    from nereid.statistics import ModelStatistics
    from nereid.tracing import SettingAnswer, SettingUpdate, TraceManager


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str  # wire name, e.g. "FP32"
    shape: tuple[int, ...]  # -1 for the batch dimension when the model batches, and for variable dims


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]
    max_batch_size: int  # not in Triton's metadata answer: what a frontend needs to shape inputs itself


@dataclass(frozen=True, slots=True)
class RepositoryIndexEntry:
    """A row of the repository index; a model that was never asked to load has only its name."""

    name: str
    version: str | None = None
    state: str | None = None  # READY, UNAVAILABLE, LOADING, UNLOADING
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SystemSharedMemoryRegion:
    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class CudaSharedMemoryRegion:
    name: str
    device_id: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """What the metrics endpoint reads of one loaded version: its statistics (live, read without a
    copy: they are counters and windows the exporter renders) and its pending requests."""

    name: str
    version: str
    tags: Mapping[str, str]  # the config's `metric_tags`, extra labels as in Triton
    max_batch_size: int
    pending: int
    statistics: ModelStatistics
    response_cache: bool = False  # its responses are cached: the nv_cache_* families report it
    load_duration_s: float = 0.0  # how long it took to load (nv_model_load_duration_secs)


class ModelServices(Protocol):
    """What model code calls back into the server for: an ensemble's steps and BLS requests (inference
    through the target model's own scheduler), and BLS model control."""

    async def infer(self, request: InferRequest) -> InferResponse:
        """`infer_queued`, awaited: for callers that await (BLS, ensembles' steps, tools)."""
        ...

    def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
        """Any number of responses (decoupled models); one for the others. Errors found before the model
        runs are raised from the first step of the iteration."""
        ...

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...


class QueuedInfer(Protocol):
    """A unary request admitted and queued, whose answer comes by callback instead of being awaited."""

    def then(self, callback: Callable[[InferResponse | BaseException], None]) -> None:
        """Call `callback` once, on the event loop, with the response or the error (call once): before
        `then` returns where the model answered already (it ran on the event loop)."""
        ...

    def cancel(self) -> None:
        """The caller went away: the request leaves its queue and counts as cancelled."""
        ...


class EngineClient(ModelServices, Protocol):
    """Everything a frontend asks of the engine. `version` "" means: as the version policy picks."""

    def infer_queued(self, request: InferRequest) -> QueuedInfer:
        """The one inference primitive: the request admitted and handed to its model's scheduler now, its
        answer to come by callback (no coroutine per request). Raises what refuses it before then, and
        DecoupledModel for a model whose responses stream (`infer_stream`)."""
        ...

    # health
    def is_live(self) -> bool: ...

    def is_ready(self) -> bool: ...

    # metadata and configuration
    def server_metadata(self) -> ServerMetadata: ...

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata: ...

    def is_decoupled(self, name: str, version: str = "") -> bool: ...

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """The completed configuration in Triton's JSON form."""
        ...

    def model_config_message(self, name: str, version: str = "") -> mc.ModelConfig:
        """The completed configuration as the protobuf message."""
        ...

    # repository and statistics
    def repository_index(self, ready_only: bool = False) -> list[RepositoryIndexEntry]: ...

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension's JSON answer: every loaded version, or the one (or ones) asked for."""
        ...

    def model_metrics(self) -> list[ModelMetrics]: ...

    # logging extension
    def log_settings(self) -> LogSettings: ...

    def update_log_settings(self, values: dict[str, Any], typed: bool = False) -> LogSettings:
        """Apply what a client sent (Triton's checks and texts); `typed`: gRPC's typed values."""
        ...

    # shared memory registry; a name None means every region
    def system_shared_memory_status(self, name: str | None = None) -> list[SystemSharedMemoryRegion]: ...

    def register_system_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None: ...

    def unregister_system_shared_memory(self, name: str | None = None) -> None: ...

    def cuda_shared_memory_status(self, name: str | None = None) -> list[CudaSharedMemoryRegion]: ...

    def register_cuda_shared_memory(self, name: str, raw_handle: str, device_id: int, byte_size: int) -> None:
        """`raw_handle` is the cudaIpcMemHandle in base64, as HTTP carries it."""
        ...

    def unregister_cuda_shared_memory(self, name: str | None = None) -> None: ...

    # trace extension
    tracer: TraceManager  # frontends sample the requests they receive

    def trace_setting(self, model_name: str = "", update: SettingUpdate | None = None) -> SettingAnswer:
        """The trace setting of `model_name` ("": the global one), after `update` when given."""
        ...
