"""One sampled trace: the request a frontend received and the requests it spawned (ensemble steps, BLS
calls), each a `RequestTrace` with an id of its own and its parent's id, all handed to the setting that
sampled them when the last of them closes (Triton's TraceManager::Trace).

While its request runs a trace only keeps raw values: a timestamp is a name and an int added to a flat
list, the model's record a few plain fields. When the trace (with its children) closes, it is formatted
at once (`TraceFormatter`: one template per model and sequence of names) and kept as bytes until its
setting writes a batch every `log-frequency` traces. What a trace records after it closed is not
written: Triton too writes a trace once it is released.

Timestamps are `time.perf_counter_ns()` values, which on Linux read CLOCK_MONOTONIC, the clock Triton's
steady_clock timestamps come from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

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

_perf_counter_ns = time.perf_counter_ns


class TraceGroup:
    """A trace that spawned children, and its children: open until the last of them closes; then they
    go to the setting that sampled the trace together. A trace without children needs none."""

    __slots__ = ("setting", "_members", "_open", "_lock")

    def __init__(self, setting: TraceSetting, root: RequestTrace) -> None:
        self.setting = setting
        # a root closed already was written on its own (a child made after its request was answered)
        self._members = [] if root._closed else [root]
        self._open = len(self._members)
        self._lock = threading.Lock()

    def add(self, trace: RequestTrace) -> None:
        with self._lock:
            self._members.append(trace)
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open:
                return
            members = tuple(self._members)
        self.setting.write_trace(members)


class RequestTrace:
    """The trace of one request through one model (Triton's TRITONSERVER_InferenceTrace)."""

    __slots__ = (
        "setting",
        "id",
        "parent_id",
        "head",
        "stamps",
        "tensors",
        "_ids",
        "_group",
        "_closed",
        "__weakref__",
    )

    def __init__(self, setting: TraceSetting, ids: Iterator[int], parent_id: int = 0) -> None:
        self.setting = setting
        self._ids = ids
        self.id = next(ids)  # itertools.count: atomic under the GIL
        self.parent_id = parent_id
        self._group: TraceGroup | None = None
        self._closed = False
        # Raw values, formatted in bulk when the setting writes (None: that level is not traced):
        # who the request was for, timestamps in the order taken (name, ns, name, ns, ...: one list, no
        # tuple each; a pair is added by one `+=`, whole even where threads race), and TENSORS records.
        # the model's record: its name, version, request id, and how many timestamps come before it
        self.head: tuple[str, int, str, int] | None = None
        level = setting.level
        self.stamps: list[str | int] | None = [] if level & LEVEL_TIMESTAMPS else None
        self.tensors: list[bytes] | None = [] if level & LEVEL_TENSORS else None

    def child(self) -> RequestTrace:
        """The trace of a request this one spawned (an ensemble step, a BLS call); its creator closes it."""
        group = self._group
        if group is None:  # the first child: this trace and its children are written together
            with self.setting.groups_lock:
                group = self._group
                if group is None:
                    group = self._group = TraceGroup(self.setting, self)
        trace = self._new(self.id)
        trace._group = group
        group.add(trace)
        return trace

    def _new(self, parent_id: int) -> RequestTrace:
        return RequestTrace(self.setting, self._ids, parent_id)

    def close(self) -> None:
        """The request is answered: once every trace of its group is closed, the group is written."""
        if self._closed:
            return
        self._closed = True
        group = self._group
        if group is None:
            self.setting.write_trace((self,))
        else:
            group.closed()

    def context(self) -> str | None:
        """What model code may propagate (`InferenceTrace.get_context()`): nothing in Triton mode."""
        return None

    # timestamps
    def timestamp(self, name: str, ns: int) -> None:
        stamps = self.stamps
        if stamps is not None:
            stamps += (name, ns)

    def now(self, name: str) -> None:
        stamps = self.stamps
        if stamps is not None:
            stamps += (name, _perf_counter_ns())

    def received(self, start_name: str, start: int, end_name: str, end: int) -> None:
        """The frontend's two receive times (one call where two `timestamp`s would do)."""
        stamps = self.stamps
        if stamps is not None:
            stamps += (start_name, start, end_name, end)

    def sent(self, start_name: str, start: int, end_name: str) -> None:
        """The response was handed on, from `start` to now: both times recorded, then the trace closes."""
        stamps = self.stamps
        if stamps is not None:
            stamps += (start_name, start, end_name, _perf_counter_ns())
        self.close()

    def admitted(
        self,
        model_name: str,
        model_version: int,
        request_id: str,
        start: int,
        queued: int,
        inputs: Iterable[InferTensor],
    ) -> None:
        """`request_start` then `queue_start`, in one call: what the admission path records."""
        stamps = self.stamps
        if stamps is not None:
            self.head = (model_name, model_version, request_id, len(stamps) // 2)
            stamps += ("REQUEST_START", start, "QUEUE_START", queued)
        if self.tensors is not None:
            self._queue_inputs(inputs)

    def request_start(self, model_name: str, model_version: int, request_id: str, ns: int) -> None:
        """The request reached its model: who it is for, then REQUEST_START."""
        stamps = self.stamps
        if stamps is not None:
            self.head = (model_name, model_version, request_id, len(stamps) // 2)
            stamps += ("REQUEST_START", ns)

    def queue_start(self, ns: int, inputs: Iterable[InferTensor]) -> None:
        stamps = self.stamps
        if stamps is not None:
            stamps += ("QUEUE_START", ns)
        if self.tensors is not None:
            self._queue_inputs(inputs)

    def _queue_inputs(self, inputs: Iterable[InferTensor]) -> None:
        tensors = self.tensors
        assert tensors is not None
        for tensor in inputs:
            tensors.append(self._tensor("TENSOR_QUEUE_INPUT", tensor.name, tensor.datatype, tensor.data))

    def compute(self, start: int, end: int) -> None:
        """An execution of the request's model ran from `start` to `end`; its results are back now."""
        stamps = self.stamps
        if stamps is not None:
            stamps += (
                "COMPUTE_START",
                start,
                "COMPUTE_INPUT_END",
                start,
                "COMPUTE_OUTPUT_START",
                end,
                "COMPUTE_END",
                _perf_counter_ns(),
            )

    def request_end(self, outputs: Iterable[InferTensor] = ()) -> None:
        tensors = self.tensors
        if tensors is not None:
            for tensor in outputs:
                tensors.append(
                    self._tensor("TENSOR_BACKEND_OUTPUT", tensor.name, tensor.datatype, tensor.data)
                )
        stamps = self.stamps
        if stamps is not None:
            stamps += ("REQUEST_END", _perf_counter_ns())

    def _tensor(self, activity: str, name: str, datatype: str, data: np.ndarray) -> bytes:
        # Formatted now: the arrays may be reused (shared memory, a model's buffers) once answered.
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
        return orjson.dumps(record)


class TraceFormatter:
    """Writes traces as the records of Triton's trace file. A trace's records come from one
    template made once per model and sequence of timestamp names (the same few recur): its id, which
    every record starts with, is put in with one `replace` of a placeholder byte, then its times with one
    `%`. Only a request id or a parent id gives the model's record a template of its own."""

    def __init__(self) -> None:
        self._stamps: dict[tuple[str, ...], bytes] = {}  # timestamp names -> their records' template
        # the model's record among them: (model name, version, timestamps before it, names) -> template
        self._headed: dict[tuple[str, int, int, tuple[str, ...]], bytes] = {}

    def records(self, traces: Sequence[RequestTrace]) -> bytes:
        """The traces' records, comma-separated (the inside of a JSON array)."""
        if len(traces) == 1:  # a trace without children, the most common
            return self._trace(traces[0])
        return b",".join([self._trace(trace) for trace in traces])

    def _trace(self, trace: RequestTrace) -> bytes:
        # a snapshot, taken at once under the GIL: name, ns, name, ns, ...
        stamps = trace.stamps[:] if trace.stamps else []
        names = tuple(stamps[0::2])
        head = trace.head
        if head is None:
            template = self._stamps_template(names) if names else b""
        else:
            # The model's record goes where it was taken, after the frontend's receive times, as Triton
            # writes it.
            model_name, version, request_id, before = head
            if not request_id and not trace.parent_id:
                key = (model_name, version, before, names)
                template = self._headed.get(key)
                if template is None:
                    template = self._headed[key] = self._head_template(head, 0, names)
            else:
                template = self._head_template(head, trace.parent_id, names)
        records = template.replace(_ID, b"%d" % trace.id) % tuple(stamps[1::2]) if template else b""
        if trace.tensors:
            records = b",".join([records, *trace.tensors] if records else trace.tensors)
        return records

    def _stamps_template(self, names: tuple[str, ...]) -> bytes:
        """One record per timestamp, as Triton writes them: the id's placeholder, and the ns to fill in."""
        template = self._stamps.get(names)
        if template is None:
            template = self._stamps[names] = b",".join(
                b'{"id":%s,"timestamps":[{"name":%s,"ns":%%d}]}' % (_ID, _escaped(name)) for name in names
            )
        return template

    def _head_template(
        self, head: tuple[str, int, str, int], parent_id: int, names: tuple[str, ...]
    ) -> bytes:
        """The timestamps' records with the model's record after the first `before` of them."""
        model_name, version, request_id, before = head
        model = b'{"id":%s,"model_name":%s,"model_version":%d' % (_ID, _escaped(model_name), version)
        if request_id:
            model += b',"request_id":' + _escaped(request_id)
        if parent_id:
            model += b',"parent_id":%d' % parent_id
        parts = [self._stamps_template(names[:before])] if before else []
        parts.append(model + b"}")
        if before < len(names):
            parts.append(self._stamps_template(names[before:]))
        return b",".join(parts)


# Where a template takes its trace's id: a byte JSON text never holds raw (orjson escapes control
# characters), so neither a name nor a request id can be mistaken for it.
_ID = b"\x00"


def _escaped(text: str) -> bytes:
    """`text` as a JSON string, safe inside a `%` template."""
    return orjson.dumps(text).replace(b"%", b"%%")


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
