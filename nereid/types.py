"""Protocol-neutral request and response types that flow between frontends and the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nereid.errors import NereidError, Unsupported
from nereid.shared_memory import SharedMemoryRef

if TYPE_CHECKING:
    from nereid.tracing.trace import RequestTrace

Parameters = dict[str, Any]

# Triton's request flags (TRITONSERVER_REQUEST_FLAG_*), as `InferRequest.flags` and backends carry them.
SEQUENCE_START = 1
SEQUENCE_END = 2

# Triton refuses a string correlation ID (sequence_id) longer than this, in bytes, as it builds the request:
# before any check of the model's, whatever the model's scheduler.
MAX_SEQUENCE_ID_BYTES = 128


def check_sequence_id(sequence_id: str) -> None:
    """Refuse a string sequence_id longer than Triton takes, with Triton's status and text."""
    if len(sequence_id) > MAX_SEQUENCE_ID_BYTES and len(sequence_id.encode()) > MAX_SEQUENCE_ID_BYTES:
        raise Unsupported(f"string correlation ID cannot be longer than {MAX_SEQUENCE_ID_BYTES} characters")


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


@dataclass(frozen=True, slots=True)
class InputLayout:
    """An input as the frontends' layout caches keep it: everything but its data, a plain array of
    `byte_size` bytes."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    dtype: np.dtype
    byte_size: int


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
    parameters: Parameters = field(default_factory=dict)  # without the request controls below
    # Request controls, decoded and checked once by each frontend's codec (Triton's reserved parameters
    # `sequence_id`, `sequence_start`, `sequence_end`, `priority` and `timeout`).
    sequence_id: int | str = 0  # the sequence's correlation id; 0 (or ""): none
    flags: int = 0  # SEQUENCE_START | SEQUENCE_END
    priority: int = 0  # 0: the model's default priority level
    timeout_us: int = 0  # 0: none
    trace: RequestTrace | None = None  # the request is traced (sampled by its frontend, or a traced child)
    # The repository an ensemble's step prefers its model from (--model-namespacing); "" for the others.
    model_namespace: str = ""
    # What a frontend's layout cache decoded it from, shared by every request it decodes the same way
    # (names, datatypes and shapes of the inputs, outputs asked for; no shared memory, no controls); None
    # for the others. A model version checks each layout once (see request_checks.checked_request).
    layout: object | None = None

    def shared_memory_regions(self) -> list[str]:
        """The registered regions this request reads inputs from or writes outputs into."""
        names = [t.shared_memory.region for t in self.inputs if t.shared_memory is not None]
        if self.outputs:
            names.extend(o.shared_memory.region for o in self.outputs if o.shared_memory is not None)
        return names

    def sequence_parameters(self) -> Parameters:
        """The sequence controls as Triton echoes them in an ensemble's response, defaults filled in."""
        return {
            "sequence_id": self.sequence_id,
            "sequence_start": bool(self.flags & SEQUENCE_START),
            "sequence_end": bool(self.flags & SEQUENCE_END),
        }


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str = ""
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class StreamEvent:
    """One event of a streamed request: a response, an error (the stream goes on), and whether it is the
    last; `response` None with `final` and no error is the final flag alone."""

    response: InferResponse | None
    error: NereidError | None = None
    final: bool = True
