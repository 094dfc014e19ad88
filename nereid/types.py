"""Protocol-neutral request and response types that flow between frontends and the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nereid.shared_memory import SharedMemoryRef

Parameters = dict[str, Any]


# Not frozen: these are built several times per request, and a frozen dataclass's __init__ costs
# about five times as much. Nothing mutates them after decoding.
@dataclass(slots=True)
class InferTensor:
    """A named tensor. `data` has the wire shape; BYTES tensors are numpy object arrays of bytes."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)
    shared_memory: SharedMemoryRef | None = None  # where the data is (inputs) or goes (outputs)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for; `binary` None means "as the request-level default"."""

    name: str
    binary: bool | None = None
    class_count: int = 0
    parameters: Parameters = field(default_factory=dict)
    shared_memory: SharedMemoryRef | None = None


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str  # "" means: as the version policy picks
    inputs: list[InferTensor]
    outputs: list[RequestedOutput] | None = None  # None: all outputs
    id: str = ""
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str = ""
    parameters: Parameters = field(default_factory=dict)
