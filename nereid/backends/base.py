"""The interface every backend implements: the backend, its instances, and the requests they execute."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import NereidError
from nereid.types import SEQUENCE_END as SEQUENCE_END  # re-exported: backends and schedulers read them here
from nereid.types import SEQUENCE_START as SEQUENCE_START

if TYPE_CHECKING:
    from nereid.backends.responses import ResponseStream
    from nereid.core.engine_client import ModelServices
    from nereid.custom_metrics import CustomMetrics
    from nereid.tracing.trace import RequestTrace

Outputs = dict[str, np.ndarray]


class OutputsWithParameters(dict[str, np.ndarray]):
    """Outputs whose response also carries parameters of the backend's own (Triton's response parameters)."""

    __slots__ = ("parameters",)

    def __init__(self, outputs: Outputs, parameters: dict[str, Any]) -> None:
        super().__init__(outputs)
        self.parameters = parameters


# What an instance returns for one request: its outputs, or the error that fails that request alone.
BackendResult = Outputs | NereidError
# How an AsyncModelInstance reports an execution: one result per request, or what failed them all.
ExecutionDone = Callable[[list[BackendResult] | BaseException], None]


@dataclass(frozen=True)
class InstanceSpec:
    """Everything a backend needs to build one execution instance of one model version."""

    model_name: str
    version: int
    config: mc.ModelConfig  # completed and validated
    model_dir: Path
    version_dir: Path
    model_file: Path  # version_dir / default_model_filename (may be a directory for some formats)
    instance_name: str  # Triton's "<group name>_<index>"
    kind: str  # "CPU", "GPU" or "MODEL"
    device_id: int
    backend_config: Mapping[str, str] = field(default_factory=dict)  # --backend-config for this backend
    server: ModelServices | None = None  # what model code calls back into (BLS); None: no server runs
    custom_metrics: CustomMetrics | None = None  # where model code's metric families go (pb_utils)


# Not frozen: one is built per request, and a frozen dataclass's __init__ costs several times as much.
# Nothing changes it after the engine builds it.
@dataclass(slots=True)
class BackendRequest:
    """One inference request as a backend sees it: inputs in the backend's shapes, and what it asked for."""

    inputs: Mapping[str, np.ndarray]
    outputs: tuple[str, ...]  # requested output names
    id: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)  # without the reserved ones below
    correlation_id: int | str = 0  # InferRequest.sequence_id
    flags: int = 0  # SEQUENCE_START | SEQUENCE_END
    timeout_us: int = 0  # 0: none
    priority: int = 0  # 0: the model's default level
    stream: ResponseStream | None = None  # a decoupled model's responses go there, not to the result
    trace: RequestTrace | None = None  # the instance pool records its executions there
    # InferRequest.layout: every request of one layout has the same input names and shapes
    layout: object | None = None


def batch_elements(request: BackendRequest) -> int:
    """Elements along the batch dimension of a request to a model that batches: its inputs' first
    dimension (1 for a request without inputs or with scalar ones)."""
    for array in request.inputs.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


class ModelInstance(Protocol):
    """An instance whose `execute` blocks: the scheduler calls it from a thread of its own (or, for models
    that take microseconds, from the event loop)."""

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """Run the requests together; one result per request, in order."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncModelInstance(Protocol):
    """An instance whose model runs elsewhere (a worker process), driven from the event loop without
    blocking it. It runs one submission at a time, and accepts up to `pipeline_depth` outstanding ones so
    that the next is at hand when one finishes."""

    pipeline_depth: int

    def submit(self, requests: Sequence[BackendRequest], done: ExecutionDone) -> None:
        """Start executing; call on the event loop. `done` is called once, on the event loop, with one
        result per request in order, or with the exception that failed the whole execution."""
        ...

    async def model_ready(self) -> bool:
        """The model's own readiness check, where it has one."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why the instance cannot serve now (its worker died and is restarting, or failed), or None."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str
    default_model_filename: str
    # Whether inputs and outputs come from the model file, so that a config left without any is an error.
    # Python models may have none (Triton loads them).
    requires_io: bool

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        """Fill in what the config leaves out (inputs, outputs, max_batch_size) from the model file."""
        ...

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        """Raise when the completed config and the model file disagree."""
        ...

    def create_instance(self, spec: InstanceSpec) -> ModelInstance | AsyncModelInstance: ...

    def gpu_available(self) -> bool: ...
