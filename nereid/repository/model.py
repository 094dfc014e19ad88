"""A loaded model version: its completed config, what requests are checked against, and its scheduler."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid import heap
from nereid.datatypes import config_to_wire, numpy_dtype
from nereid.errors import ModelConfigError
from nereid.scheduling import Scheduler
from nereid.statistics import ModelStatistics
from nereid.types import RequestedOutput


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A config input or output as the infer path needs it, computed once at load."""

    name: str
    datatype: str  # wire name, e.g. "FP32"
    dims: tuple[int, ...]  # API dims without the batch dimension
    backend_dims: tuple[int, ...] | None  # `reshape` dims, or None when the backend sees `dims`
    numpy_dtype: np.dtype
    optional: bool = False
    labels: tuple[str, ...] = ()


@dataclass
class ModelVersion:
    name: str
    version: int
    config: mc.ModelConfig
    config_json: dict[str, Any]
    metadata: dict[str, Any]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    scheduler: Scheduler
    output_names: tuple[str, ...] = field(default=())
    required_inputs: tuple[str, ...] = field(default=())
    statistics: ModelStatistics = field(default_factory=ModelStatistics)  # shared with its scheduler
    fingerprint: str = ""  # of its version folder and label files: unchanged means it can keep serving
    ensemble: bool = False  # its responses echo the sequence parameters, as Triton's ensembles do
    load_duration_s: float = 0.0  # from the start of its load to ready (nv_model_load_duration_secs)
    # gives its instances back to the server's bound (instance_budget.py) once stopped; None: not counted
    release_instances: Callable[[], None] | None = None
    # Read on every request, so computed once rather than from the protobuf config each time.
    max_batch_size: int = field(init=False)
    decoupled: bool = field(init=False)  # responses come through streams (model_transaction_policy)
    version_text: str = field(init=False)
    all_outputs: tuple[RequestedOutput, ...] = field(init=False)  # what a request naming no outputs gets
    # Request layouts that passed this version's checks, with the output names each asks for
    # (request_checks.checked_request)
    checked_layouts: dict[object, tuple[str, ...]] = field(init=False, default_factory=dict)

    # Requests between lookup and response. Touched on the event loop only; a retired version (replaced
    # or unloaded) is stopped once it reaches zero, so no request in flight is dropped.
    inflight: int = field(init=False, default=0)
    retired: bool = field(init=False, default=False)
    drained: threading.Event = field(init=False, default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.max_batch_size = self.config.max_batch_size
        self.decoupled = self.config.model_transaction_policy.decoupled
        # Triton caches neither decoupled (refused at load when the cache is enabled) nor sequence-batched
        # models' responses.
        self.response_cache = (
            self.config.response_cache.enable
            and not self.decoupled
            and not self.config.HasField("sequence_batching")
        )
        self.version_text = str(self.version)
        self.all_outputs = tuple(RequestedOutput(name) for name in self.output_names)

    def request_done(self) -> None:
        self.inflight -= 1
        if self.retired and self.inflight == 0:
            self.drained.set()

    def retire(self, timeout_s: float) -> None:
        """Wait (from a thread other than the event loop) for requests in flight, then stop."""
        self.retired = True
        # If the loop finished the last request before `retired` was set, it did not set the event.
        if self.inflight > 0 and not self.drained.wait(timeout_s):
            logging.getLogger(__name__).warning(
                "model '%s' version %d: %d requests still in flight after %.0f s; stopping it anyway",
                self.name,
                self.version,
                self.inflight,
                timeout_s,
            )
        self.stop()

    def outstanding(self) -> int:
        """What a stopping server waits for: requests in flight, and started sequences that wait for their
        next request (Triton counts both as in-flight inferences)."""
        return self.inflight + self.scheduler.waiting_sequences()

    def unavailable_reason(self) -> str | None:
        """Why this loaded version cannot serve right now (a Python worker restarting, say), or None."""
        return self.scheduler.unavailable_reason()

    def stop(self) -> None:
        """Release the instances (a Python model's finalize has run when this returns)."""
        self.scheduler.stop()
        if self.release_instances is not None:
            self.release_instances()
        heap.version_unloaded()
        # Triton's line for every version it unloads, at shutdown too; tools count them.
        logging.getLogger(__name__).info("successfully unloaded '%s' version %d", self.name, self.version)


def tensor_specs(tensors: Any, labels: dict[str, tuple[str, ...]] | None = None) -> dict[str, TensorSpec]:
    specs: dict[str, TensorSpec] = {}
    for tensor in tensors:
        datatype = config_to_wire(mc.DataType.Name(tensor.data_type))
        specs[tensor.name] = TensorSpec(
            name=tensor.name,
            datatype=datatype,
            dims=tuple(tensor.dims),
            backend_dims=tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None,
            numpy_dtype=numpy_dtype(datatype),
            optional=getattr(tensor, "optional", False),
            labels=(labels or {}).get(tensor.name, ()),
        )
    return specs


def model_metadata(config: mc.ModelConfig, versions: list[int]) -> dict[str, Any]:
    """Body of GET /v2/models/{m}: shapes include -1 for the batch dimension when batching."""
    batch = [-1] if config.max_batch_size > 0 else []

    def describe(tensors: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "datatype": config_to_wire(mc.DataType.Name(t.data_type)),
                "shape": batch + list(t.dims),
            }
            for t in tensors
        ]

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": config.platform or config.backend,
        "inputs": describe(config.input),
        "outputs": describe(config.output),
    }


def read_labels(model_dir: Path, config: mc.ModelConfig) -> dict[str, tuple[str, ...]]:
    """The labels of each output that names a label file, one per line."""
    labels: dict[str, tuple[str, ...]] = {}
    for output in config.output:
        if output.label_filename:
            path = model_dir / output.label_filename
            try:
                labels[output.name] = tuple(path.read_text(encoding="utf-8").splitlines())
            except (OSError, UnicodeDecodeError) as exc:
                raise ModelConfigError(
                    f"model '{config.name}': cannot read label file '{output.label_filename}' of output "
                    f"'{output.name}': {exc}"
                ) from None
    return labels
