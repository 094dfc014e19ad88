"""One sampled trace: the request a frontend received and the requests it spawned (ensemble steps, BLS
calls), each a `RequestTrace` with an id of its own and its parent's id, all written together when the
last of them closes (Triton's TraceManager::Trace).

Timestamps are `time.perf_counter_ns()` values, which on Linux read CLOCK_MONOTONIC, the clock Triton's
steady_clock timestamps come from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from nereid.tracing.config import LEVEL_TENSORS, LEVEL_TIMESTAMPS

if TYPE_CHECKING:
    from nereid.tracing.settings import TraceSetting
    from nereid.types import InferTensor

# Timestamps that frontends capture, recorded on the trace of the request they received.
HTTP_RECV_START = "HTTP_RECV_START"
HTTP_RECV_END = "HTTP_RECV_END"
HTTP_SEND_START = "HTTP_SEND_START"
HTTP_SEND_END = "HTTP_SEND_END"
GRPC_WAITREAD_START = "GRPC_WAITREAD_START"
GRPC_WAITREAD_END = "GRPC_WAITREAD_END"
GRPC_SEND_START = "GRPC_SEND_START"
GRPC_SEND_END = "GRPC_SEND_END"
INFER_RESPONSE_COMPLETE = "INFER_RESPONSE_COMPLETE"


class TraceGroup:
    """A sampled trace and its children: their records, grouped by trace id, until the last one closes;
    then they go to the setting that sampled the trace (Triton mode)."""

    def __init__(self, setting: TraceSetting, ids: Iterable[int]) -> None:
        self.setting = setting
        self.level = setting.level
        self._ids = iter(ids)
        self._lock = threading.Lock()
        self._open = 0
        self._records: dict[int, list[bytes]] = {}

    def new_trace(self, parent: RequestTrace | None = None) -> RequestTrace:
        with self._lock:
            self._open += 1
            trace_id = next(self._ids)
        return RequestTrace(self, trace_id, 0 if parent is None else parent.id)

    def record(self, trace_id: int, *records: bytes) -> None:
        with self._lock:
            kept = self._records.get(trace_id)
            if kept is None:
                self._records[trace_id] = list(records)
            else:
                kept.extend(records)

    def closed(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open:
                return
            traces = [b",".join(records) for records in self._records.values()]
        self.setting.write_trace(b",".join(traces))


class RequestTrace:
    """The trace of one request through one model (Triton's TRITONSERVER_InferenceTrace)."""

    __slots__ = ("group", "id", "parent_id", "_timestamps", "_tensors", "_pending", "__weakref__")

    def __init__(self, group: TraceGroup, trace_id: int, parent_id: int) -> None:
        self.group = group
        self.id = trace_id
        self.parent_id = parent_id
        self._timestamps = bool(group.level & LEVEL_TIMESTAMPS)
        self._tensors = bool(group.level & LEVEL_TENSORS)
        # Records in the order taken, written out at close: a timestamp costs an append on the request
        # path, and the group's lock is taken once per trace (None once closed).
        self._pending: list[bytes | tuple[str, int]] | None = []

    def child(self) -> RequestTrace:
        """The trace of a request this one spawned (an ensemble step, a BLS call); its creator closes it."""
        return self.group.new_trace(self)

    def close(self) -> None:
        """The request is answered: once every trace of the group is closed, the group is written."""
        pending, self._pending = self._pending, None
        if pending:
            self.group.record(self.id, *(self._format(entry) for entry in pending))
        self.group.closed()

    def _format(self, entry: bytes | tuple[str, int]) -> bytes:
        if isinstance(entry, bytes):
            return entry
        return b'{"id":%d,"timestamps":[{"name":"%s","ns":%d}]}' % (self.id, entry[0].encode(), entry[1])

    def _keep(self, entry: bytes | tuple[str, int]) -> None:
        pending = self._pending
        if pending is not None:
            pending.append(entry)
        else:  # taken after close (a caller's late stamp): straight to the group
            self.group.record(self.id, self._format(entry))

    def context(self) -> str | None:
        """What model code may propagate (`InferenceTrace.get_context()`): nothing in Triton mode."""
        return None

    # timestamps
    def timestamp(self, name: str, ns: int) -> None:
        if self._timestamps:
            self._keep((name, ns))

    def now(self, name: str) -> None:
        self.timestamp(name, time.perf_counter_ns())

    def request_start(self, model_name: str, model_version: int, request_id: str, ns: int) -> None:
        """The request reached its model: who it is for, then REQUEST_START."""
        if not self._timestamps:
            return
        fields: dict[str, Any] = {"id": self.id, "model_name": model_name, "model_version": model_version}
        if request_id:
            fields["request_id"] = request_id
        if self.parent_id:
            fields["parent_id"] = self.parent_id
        self._keep(orjson.dumps(fields))
        self.timestamp("REQUEST_START", ns)

    def queue_start(self, ns: int, inputs: Iterable[InferTensor]) -> None:
        self.timestamp("QUEUE_START", ns)
        if self._tensors:
            for tensor in inputs:
                self._tensor("TENSOR_QUEUE_INPUT", tensor.name, tensor.datatype, tensor.data)

    def compute(self, start: int, end: int) -> None:
        """An execution of the request's model ran from `start` to `end`; its results are back now."""
        if self._timestamps:
            self.timestamp("COMPUTE_START", start)
            self.timestamp("COMPUTE_INPUT_END", start)
            self.timestamp("COMPUTE_OUTPUT_START", end)
            self.timestamp("COMPUTE_END", time.perf_counter_ns())

    def request_end(self, outputs: Iterable[InferTensor] = ()) -> None:
        if self._tensors:
            for tensor in outputs:
                self._tensor("TENSOR_BACKEND_OUTPUT", tensor.name, tensor.datatype, tensor.data)
        self.now("REQUEST_END")

    def _tensor(self, activity: str, name: str, datatype: str, data: np.ndarray) -> None:
        record = {
            "id": self.id,
            "activity": activity,
            "tensor": {
                "name": name,
                "data": tensor_text(datatype, data),
                "shape": ",".join(str(d) for d in data.shape),
                "dtype": datatype,
            },
        }
        self._keep(orjson.dumps(record))


def tensor_text(datatype: str, data: np.ndarray) -> str:
    """A tensor's elements as Triton's trace writes them: comma-separated, floats with six significant
    digits (C++ streams' default), booleans as 1 and 0, strings quoted; FP16 and BF16 left empty."""
    flat = np.asarray(data).reshape(-1)
    if datatype in ("FP16", "BF16"):
        return ""
    if datatype == "BYTES":
        return ",".join(
            '"' + (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) + '"' for v in flat
        )
    if datatype in ("FP32", "FP64"):
        return ",".join(format(float(v), "g") for v in flat)
    if datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat)
    return ",".join(str(int(v)) for v in flat)
