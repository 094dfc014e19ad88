"""One sampled trace: the request a frontend received and the requests it spawned (ensemble steps, BLS
calls), each a `RequestTrace` with an id of its own and its parent's id, all handed to the setting that
sampled them when the last of them closes (Triton's TraceManager::Trace).

While its request runs a trace only keeps raw values: a timestamp is a name and an int added to a flat
list, the model's record a few plain fields; a `PlainTrace`, the common request's under the common
setting, keeps its times in fields until it is sent. When the trace (with its children) closes, its
setting keeps its layout and its ints (`records.py`) and writes them with the rest of its batch every
`log-frequency` traces. What a trace records after it closed is not written: Triton too writes a trace once it is
released.

Timestamps are `time.perf_counter_ns()` values, which on Linux read CLOCK_MONOTONIC, the clock Triton's
steady_clock timestamps come from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import orjson

from nereid.tracing.records import tensor_text

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

_perf_counter_ns = _pc = time.perf_counter_ns
_new_trace = object.__new__

# What an execution records, in this order.
_C_START, _C_INPUT, _C_OUTPUT, _C_END = (
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
)


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
        self.setting.write_group(members)


class RequestTrace:
    """The trace of one request through one model (Triton's TRITONSERVER_InferenceTrace)."""

    __slots__ = (
        "setting",
        "id",
        "parent_id",
        "head",
        "stamps",
        "tensors",
        "executed",
        "complete",
        "_ids",
        "_group",
        "_closed",
        "__weakref__",
    )

    def __init__(
        self,
        setting: TraceSetting,
        ids: Iterator[int],
        parent_id: int = 0,
        received: tuple[str | int, ...] = (),
    ) -> None:
        self.setting = setting
        self._ids = ids
        self.id = next(ids)  # itertools.count: atomic under the GIL
        self.parent_id = parent_id
        self._group: TraceGroup | None = None
        self._closed = False
        # The execution that ran the request, as the instance pool leaves it (start, end, results back):
        # recorded with REQUEST_END, in one step (an attribute set where a call would cost more).
        self.executed: tuple[int, int, int] | None = None
        # INFER_RESPONSE_COMPLETE as the frontend takes it (0: not yet): an attribute set where a call would
        # cost more, recorded with the next timestamp (most often the send times, by `sent`).
        self.complete = 0
        # Raw values, formatted in bulk when the setting writes (None: that level is not traced):
        # who the request was for, timestamps in the order taken (name, ns, name, ns, ...: one list, no
        # tuple each; a pair is added by one `+=`, whole even where threads race; the frontend's receive
        # times first), and TENSORS records.
        # the model's record: its name, version, request id, and how many timestamps come before it
        self.head: tuple[str, int, str, int] | None = None
        self.stamps: list[str | int] | None = [*received] if setting.timestamps else None
        self.tensors: list[bytes] | None = [] if setting.tensors else None

    @staticmethod
    def root(setting: TraceSetting, ids: Iterator[int], received: tuple[str | int, ...]) -> RequestTrace:
        """`RequestTrace(setting, ids, 0, received)`, field for field (see `_rooted`)."""
        stamps = [*received] if setting.timestamps else None
        return _rooted(RequestTrace, setting, ids, stamps, [] if setting.tensors else None)

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
        complete = self.complete
        if complete:  # answered, but not sent
            self.complete = 0
            self.timestamp(INFER_RESPONSE_COMPLETE, complete)
        if self.executed is not None:  # executed, but never released (REQUEST_END): its times still count
            self.compute(*self.executed)
            self.executed = None
        self._closed = True
        group = self._group
        if group is None:
            self.setting.write_group((self,))
        else:
            group.closed()

    # Whether `context` gives anything (a class constant: callers on the request path skip the call).
    has_context = False

    def context(self) -> str | None:
        """What model code may propagate (`InferenceTrace.get_context()`): nothing in Triton mode."""
        return None

    # timestamps
    def timestamp(self, name: str, ns: int) -> None:
        stamps = self.stamps
        if stamps is not None:
            complete = self.complete
            if complete:
                self.complete = 0
                stamps += (INFER_RESPONSE_COMPLETE, complete)
            stamps += (name, ns)

    def now(self, name: str) -> None:
        stamps = self.stamps
        if stamps is not None:
            complete = self.complete
            if complete:
                self.complete = 0
                stamps += (INFER_RESPONSE_COMPLETE, complete)
            stamps += (name, _perf_counter_ns())

    def sent(self, start_name: str, start: int, end_name: str) -> None:
        """The response was handed on, from `start` to now: both times recorded, then the trace closes."""
        stamps = self.stamps
        if stamps is not None:
            complete = self.complete
            if complete:
                self.complete = 0
                stamps += (INFER_RESPONSE_COMPLETE, complete, start_name, start, end_name, _pc())
            else:
                stamps += (start_name, start, end_name, _pc())
        if self._group is None and self.executed is None and not self._closed:  # close(), common case
            self._closed = True
            self.setting.write_group((self,))
        else:
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

    def compute(self, start: int, end: int, back: int) -> None:
        """An execution of the request's model ran from `start` to `end`; its results were back at `back`."""
        stamps = self.stamps
        if stamps is not None:
            stamps += (_C_START, start, _C_INPUT, start, _C_OUTPUT, end, _C_END, back)

    def request_end(self, outputs: Iterable[InferTensor] = (), ns: int = 0) -> None:
        """The request is released, at `ns` (the admission path's own reading) or now."""
        tensors = self.tensors
        if tensors is not None:
            for tensor in outputs:
                tensors.append(
                    self._tensor("TENSOR_BACKEND_OUTPUT", tensor.name, tensor.datatype, tensor.data)
                )
        stamps = self.stamps
        if stamps is None:
            return
        executed = self.executed
        if executed is None:
            stamps += ("REQUEST_END", ns or _perf_counter_ns())
        else:  # what `compute` records, then REQUEST_END
            self.executed = None
            start, end, back = executed
            stamps += (
                _C_START,
                start,
                _C_INPUT,
                start,
                _C_OUTPUT,
                end,
                _C_END,
                back,
                "REQUEST_END",
                ns or _pc(),
            )

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


def _rooted(
    cls: type[RequestTrace],
    setting: TraceSetting,
    ids: Iterator[int],
    stamps: list[str | int] | None,
    tensors: list[bytes] | None,
) -> RequestTrace:
    """A root trace of `cls` as `RequestTrace()` makes one, with no `__init__` run: the request path's
    way (a class call costs a frame more than a function)."""
    trace = _new_trace(cls)
    trace.setting = setting
    trace._ids = ids
    trace.id = next(ids)
    trace.parent_id = 0
    trace._group = None
    trace._closed = False
    trace.executed = None
    trace.complete = 0
    trace.head = None
    trace.stamps = stamps
    trace.tensors = tensors
    return trace


# The names of a plain trace's timestamps between the frontend's receive and send times, in order.
PLAIN_NAMES = (
    "REQUEST_START",
    "QUEUE_START",
    _C_START,
    _C_INPUT,
    _C_OUTPUT,
    _C_END,
    "REQUEST_END",
    INFER_RESPONSE_COMPLETE,
)


_NOT_SENT: tuple[str, int, str, int] = ("", 0, "", 0)


class PlainTrace(RequestTrace):
    """A trace under a plain setting (Triton mode, TIMESTAMPS only, every request sampled) while its
    request takes the common way: received, admitted, executed once, released, answered, sent. Its times
    wait in fields, with no list of timestamps. Sent, it waits in its setting's `plain` list, which keeps
    a few hundred at a time as one row of ints each (`TraceSetting.keep_plain`).

    Any other step first turns it into a `RequestTrace` (`_general`: the list its times would be in), and
    it records as one from there on, so that what it writes never depends on the way its request took.
    """

    __slots__ = ("received", "start", "queued", "end", "sends")
    received: tuple[str | int, ...]  # the frontend's receive times: name, ns, name, ns
    start: int  # REQUEST_START (0: not admitted yet)
    queued: int  # QUEUE_START
    end: int  # REQUEST_END (0: not released yet)
    sends: tuple[str, int, str, int]  # the frontend's send times, once sent: name, ns, name, ns

    @staticmethod
    def root(setting: TraceSetting, ids: Iterator[int], received: tuple[str | int, ...]) -> RequestTrace:
        """A root trace under `setting`, plain where the frontend gave its two receive times."""
        if len(received) != 4:
            return RequestTrace.root(setting, ids, received)
        trace: PlainTrace = _rooted(PlainTrace, setting, ids, None, None)  # type: ignore[assignment]
        trace.received = received  # and no list of timestamps (None) while it is plain
        trace.start = trace.queued = trace.end = 0
        trace.sends = _NOT_SENT
        return trace

    def _general(self) -> None:
        """Leave the common way: its times so far into the list a `RequestTrace` keeps, in their order."""
        if self.stamps is not None:
            return
        stamps = self.stamps = [*self.received]
        if self.start:
            stamps += ("REQUEST_START", self.start, "QUEUE_START", self.queued)
        if self.end:  # released after its execution, left in `executed`: recorded as `request_end` does
            RequestTrace.request_end(self, (), self.end)

    # the common way
    def admitted(
        self,
        model_name: str,
        model_version: int,
        request_id: str,
        start: int,
        queued: int,
        inputs: Iterable[InferTensor],
    ) -> None:
        if self.stamps is None and not self.start:
            self.head = (model_name, model_version, request_id, 2)  # after the two receive times
            self.start = start
            self.queued = queued
            return
        self._general()
        RequestTrace.admitted(self, model_name, model_version, request_id, start, queued, inputs)

    def request_end(self, outputs: Iterable[InferTensor] = (), ns: int = 0) -> None:
        if self.stamps is None and self.start and not self.end and self.executed is not None:
            self.end = ns or _pc()  # the execution stays in `executed` until the row is made
            return
        self._general()
        RequestTrace.request_end(self, outputs, ns)

    def sent(self, start_name: str, start: int, end_name: str) -> None:
        if self.stamps is None and self.end and self.complete:  # the whole common way: one row, soon
            self._closed = True
            self.sends = (start_name, start, end_name, _pc())
            setting = self.setting
            plain = setting.plain
            plain.append(self)
            if len(plain) >= setting.plain_batch or setting.retired:
                setting.keep_plain()
            return
        self._general()
        RequestTrace.sent(self, start_name, start, end_name)

    # every other step: as a RequestTrace
    def close(self) -> None:
        self._general()
        RequestTrace.close(self)

    def child(self) -> RequestTrace:
        self._general()
        return RequestTrace.child(self)

    def timestamp(self, name: str, ns: int) -> None:
        self._general()
        RequestTrace.timestamp(self, name, ns)

    def now(self, name: str) -> None:
        self._general()
        RequestTrace.now(self, name)

    def request_start(self, model_name: str, model_version: int, request_id: str, ns: int) -> None:
        self._general()
        RequestTrace.request_start(self, model_name, model_version, request_id, ns)

    def queue_start(self, ns: int, inputs: Iterable[InferTensor]) -> None:
        self._general()
        RequestTrace.queue_start(self, ns, inputs)

    def compute(self, start: int, end: int, back: int) -> None:
        self._general()
        RequestTrace.compute(self, start, end, back)
