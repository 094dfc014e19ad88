"""The one interface every backend implements, and the description of an instance to build."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc


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


class ModelInstance(Protocol):
    """One execution instance. `execute` blocks; schedulers call it from a worker thread."""

    def execute(self, inputs: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        """Run one batch: inputs in the backend's shapes, returns the requested outputs."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str
    default_model_filename: str

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        """Fill in what the config leaves out (inputs, outputs, max_batch_size) from the model file."""
        ...

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        """Raise when the completed config and the model file disagree."""
        ...

    def create_instance(self, spec: InstanceSpec) -> ModelInstance: ...

    def gpu_available(self) -> bool: ...
