"""Trace settings, global and per model, as the trace extension reads and updates them (Triton's
TraceManager): sampling by rate and count, and where sampled traces are written.

A model's setting mirrors the global one for every field it does not specify, and follows later global
updates of those fields; clearing a field (null) falls back to the global value, and a model setting
with no field left specified is dropped. Updating a setting replaces it: traces sampled under the old
one still finish there, and its traces still pending are written once the last of them ends.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nereid.tracing.config import LEVEL_OFF, LEVEL_TENSORS, LEVEL_TIMESTAMPS
from nereid.tracing.records import Layout, TraceFormatter, buffers, keep
from nereid.tracing.trace import PLAIN_NAMES, PlainTrace, RequestTrace

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

log = logging.getLogger("nereid.tracing")

MIN_TRACE_COUNT = -1
# Plain traces wait, sent, until this many are kept at once: one lock and one pass where each would take
# its own, and no more of them alive than the garbage collector's youngest generation holds.
PLAIN_WAITING = 256

_root_trace = RequestTrace.root


class TraceFile:
    """Where one `trace_file` name's traces go: the file itself (a JSON array, opened at the first write
    and closed at shutdown), or `<name>.<index>` files written whole. Traces are formatted here, a batch
    at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._index = 0
        self._lock = threading.Lock()
        self._stream: object | None = None
        self._closed = False
        self.formatter = TraceFormatter()  # the layouts of its traces' records

    def save(self, traces: Sequence[bytes | np.ndarray], indexed: bool) -> None:
        """Write the records of a batch of traces (comma-separated), given in pieces."""
        try:
            if indexed:
                with self._lock:
                    index = self._index
                    self._index += 1
                with open(f"{self.name}.{index}", "wb") as file:
                    file.write(b"[")
                    file.writelines(buffers(traces))
                    file.write(b"]")
                return
            with self._lock:
                if self._closed:  # a trace that ended after shutdown: opening the file again would empty it
                    log.warning(
                        "trace file %s is closed: a trace that ended after shutdown is dropped", self.name
                    )
                    return
                if self._stream is None:
                    stream = open(self.name, "wb")  # noqa: SIM115 - open until shutdown, as Triton's
                    stream.write(b"[")
                    self._stream = stream
                else:
                    stream = self._stream  # type: ignore[assignment]
                    stream.write(b",")
                stream.writelines(buffers(traces))
                stream.flush()
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
            self._closed = True
        if stream is not None:
            stream.write(b"]")  # type: ignore[attr-defined]
            stream.close()  # type: ignore[attr-defined]


class TraceSetting:
    """One setting's values, which of them it specifies itself, and its sampling state."""

    def __init__(
        self,
        level: int,
        rate: int,
        count: int,
        log_frequency: int,
        file: TraceFile,
        mode: str,
        specified: frozenset[str] = frozenset(),
    ) -> None:
        self.level = level
        # what its traces record, as flags read once a trace (a test of `level` costs more)
        self.timestamps = bool(level & LEVEL_TIMESTAMPS)
        self.tensors = bool(level & LEVEL_TENSORS)
        self.rate = rate
        self.count = count
        self.log_frequency = log_frequency
        self.file = file
        self.mode = mode
        self.specified = specified  # of "level", "rate", "count", "log_frequency"
        self._lock = threading.Lock()
        self._sample = 0
        self._collected = 0
        self._in_stream = 0  # traces kept (a trace and its children count once)
        # The traces kept, until their batch is written: the layout of each (and its tensors' records), and
        # their values in one flat list of ints; nothing of a trace outlives its request but ints, which
        # the garbage collector never visits one by one.
        self._kept: list[Layout | bytes] = []
        self._values: list[int] = []
        self._in_flight = 0  # traces sampled and not written, but those counted in `started`
        # The traces started with no lock taken (by `start`, or the manager inline): next() is atomic under
        # the GIL. Reading it counts too (`_probes`), which `_flying` takes off.
        self.started = itertools.count()
        self._probes = 0
        self.retired = False  # replaced by an update (read by plain traces as they are sent)
        self._batch = log_frequency or 1 << 62  # traces kept before they are written
        # Plain traces sent and not kept yet, in the order sent: appended to with no lock (an append is
        # atomic under the GIL, and the list is never replaced), kept a few hundred at a time.
        self.plain: list[PlainTrace] = []
        self.plain_batch = 0  # how many to wait for: see `_plain_due`
        self._plain_due()
        self.every = False  # whether every request is sampled, none counted (valid, rate 1, no count)
        # the model's record, frontend's names and layout of the last plain trace kept whose layout is kept
        self._last_row: tuple[object, ...] = (None,) * 6
        self.groups_lock = threading.Lock()  # a trace's first child makes its group under it
        if level == LEVEL_OFF:
            self.reason = "tracing is disabled"
        elif rate == 0:
            self.reason = "sample rate must be non-zero"
        elif mode == "triton" and not file.name:
            self.reason = "trace file name is not given"
        else:
            self.reason = ""
            self.every = rate == 1 and count < 0
        # how its traces are made: plain ones where every request is sampled for its timestamps alone
        self.new_trace = (
            PlainTrace.root if self.every and not self.tensors and mode == "triton" else _root_trace
        )

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def start(self, ids: Iterator[int], received: tuple[str | int, ...]) -> RequestTrace | None:
        """The trace of a request under this (Triton-mode) setting when it is sampled, with the frontend's
        receive times; else None."""
        if self.every:  # the common setting: nothing to count but the traces in flight, with no lock
            next(self.started)
        elif not self.sample():
            return None
        return self.new_trace(self, ids, received)

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced: every `rate`-th request while `count` lasts, or any request
        `force`d (OpenTelemetry context propagated by the client). Rate 0 samples forced requests only."""
        with self._lock:
            hit = False
            if self.rate != 0:
                if not self.valid and not force:
                    return False
                self._sample += 1
                hit = self._sample % self.rate == 0
                if hit and self.count > 0:
                    self.count -= 1
                elif hit and self.count == 0:
                    hit = False
            if hit or force:
                self._in_flight += 1
                return True
            return False

    def keep_plain(self) -> None:
        """Keep the plain traces waiting (see `PlainTrace.sent`), and write the batches they complete."""
        with self._lock:
            batches = self._keep_plain()
            finished = self.retired and self._flying() == 0
        self._save_all(batches)
        if finished:
            self.flush()

    def _keep_plain(self) -> list[tuple[list[Layout | bytes], list[int]]]:
        """Under the lock: the plain traces waiting kept as `write_group` keeps a trace (their layout and
        one row of ints each: id, then every timestamp's ns in order), in the order they were sent; the
        batches of `log-frequency` traces they complete, to write."""
        plain = self.plain
        count = len(plain)
        if not count:
            return []
        traces = plain[:count]
        del plain[:count]  # slicing, not a new list: a trace appended meanwhile stays for the next time
        batches = []
        formatter = self.file.formatter
        kept, values = self._kept, self._values
        last = self._last_row
        for trace in traces:
            head = trace.head
            received: tuple[Any, ...] = trace.received
            sends = trace.sends
            if (
                head == last[0]
                and received[0] is last[1]
                and received[2] is last[2]
                and sends[0] is last[3]
                and sends[2] is last[4]
            ):
                layout: Layout = last[5]  # type: ignore[assignment]
            else:
                key = (head, False, received[0], received[2], *PLAIN_NAMES, sends[0], sends[2])
                layout = formatter.layouts.get(key) or formatter.layout(key)
                if key in formatter.layouts:  # kept there (no request id): worth remembering
                    last = self._last_row = (head, received[0], received[2], sends[0], sends[2], layout)
            executed: tuple[int, int, int] = trace.executed  # type: ignore[assignment]
            compute = executed[0]
            kept.append(layout)
            values += (
                trace.id,
                received[1],
                received[3],
                trace.start,
                trace.queued,
                compute,
                compute,
                executed[1],
                executed[2],
                trace.end,
                trace.complete,
                sends[1],
                sends[3],
            )
            self._in_stream += 1  # nothing counted: a plain setting has no count to reach
            if self._in_stream >= self._batch:
                batches.append(self._take())
                kept, values = self._kept, self._values
        self._in_flight -= count
        self._plain_due()
        return batches

    def _plain_due(self) -> None:
        """Under the lock: keep plain traces again once as many wait as complete the batch being kept (so
        that a `log-frequency` file is written with its last trace, as Triton writes it), or sooner."""
        self.plain_batch = min(PLAIN_WAITING, self._batch - self._in_stream)

    def write_group(self, traces: Sequence[RequestTrace]) -> None:
        """A sampled trace finished, with its children if it had any (`traces`; none in opentelemetry mode):
        keep them, and write the traces kept to `<file>.<index>` once `count` traces were collected or every
        `log_frequency` traces."""
        formatter = self.file.formatter
        with self._lock:
            batches = self._keep_plain()  # those sent before it, first
            self._in_flight -= 1
            for trace in traces:
                keep(formatter, trace, self._kept, self._values)
            self._in_stream += 1
            self._collected += 1
            full = self._in_stream >= self._batch or (self.count == 0 and self._collected == self._sample)
            if full:
                batches.append(self._take())
            self._plain_due()
            finished = self.retired and self._flying() == 0
        self._save_all(batches)
        if finished:
            self.flush()

    def _flying(self) -> int:
        """The traces sampled and not yet written (under the lock)."""
        started = next(self.started) - self._probes
        self._probes += 1
        return self._in_flight + started

    def _take(self) -> tuple[list[Layout | bytes], list[int]]:
        batch = self._kept, self._values
        self._kept = []
        self._values = []
        self._in_stream = 0
        return batch

    def _save_all(self, batches: list[tuple[list[Layout | bytes], list[int]]]) -> None:
        for batch in batches:
            self._save(batch, indexed=True)

    def _save(self, batch: tuple[list[Layout | bytes], list[int]], indexed: bool) -> None:
        kept, values = batch
        if kept:
            self.file.save(self.file.formatter.batch(kept, values), indexed)

    def retire(self) -> None:
        """Replaced by an update: write what is kept once the traces sampled under it have finished."""
        with self._lock:
            self.retired = True
            batches = self._keep_plain()
            finished = self._flying() == 0
        self._save_all(batches)
        if finished:
            self.flush()

    def flush(self) -> None:
        """Write the traces kept: to `<file>.<index>` with a log frequency, else to the file itself."""
        with self._lock:
            batches = self._keep_plain()
            last = self._take() if self.mode == "triton" and self._in_stream else None
        self._save_all(batches)
        if last is not None:
            self._save(last, indexed=self.log_frequency != 0)


@dataclass(frozen=True)
class SettingUpdate:
    """New values of a trace setting update: a field absent is left as it is, None clears it."""

    level: int | None = None
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    cleared: frozenset[str] = frozenset()  # fields to clear: the setting falls back to the global value
