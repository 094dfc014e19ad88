"""Trace settings, global and per model, as the trace extension reads and updates them (Triton's
TraceManager): sampling by rate and count, and where sampled traces are written.

A model's setting mirrors the global one for every field it does not specify, and follows later global
updates of those fields; clearing a field (null) falls back to the global value, and a model setting
with no field left specified is dropped. Updating a setting replaces it: traces sampled under the old
one still finish there, and its traces still pending are written once the last of them ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nereid.tracing.config import LEVEL_OFF
from nereid.tracing.trace import TraceFormatter

if TYPE_CHECKING:
    from nereid.tracing.trace import RequestTrace

log = logging.getLogger("nereid.tracing")

MIN_TRACE_COUNT = -1


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
        # A finished trace's records (it and its children): formatted when it closes, so that nothing of
        # it outlives its request but bytes, which the garbage collector never has to visit.
        self.format: Callable[[Sequence[RequestTrace]], bytes] = TraceFormatter().records

    def save(self, batch: Sequence[bytes], indexed: bool) -> None:
        """Write the records of a batch of traces (each as `format` made them)."""
        traces = b",".join(batch)
        try:
            if indexed:
                with self._lock:
                    index = self._index
                    self._index += 1
                Path(f"{self.name}.{index}").write_bytes(b"[" + traces + b"]")
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
                stream.write(traces)
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
        self._stream: list[bytes] = []  # the records of the traces kept
        self._in_flight = 0
        self._retired = False
        self.groups_lock = threading.Lock()  # a trace's first child makes its group under it
        if level == LEVEL_OFF:
            self.reason = "tracing is disabled"
        elif rate == 0:
            self.reason = "sample rate must be non-zero"
        elif mode == "triton" and not file.name:
            self.reason = "trace file name is not given"
        else:
            self.reason = ""

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced: every `rate`-th request while `count` lasts, or any request
        `force`d (OpenTelemetry context propagated by the client). Rate 0 samples forced requests only."""
        with self._lock:
            hit = False
            if self.rate != 0:
                if (self.reason or self.count == 0) and not force:  # not valid (inlined: once a request)
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

    def write_trace(self, traces: Sequence[RequestTrace]) -> None:
        """A sampled trace finished (`traces`: it and its children, none in opentelemetry mode): keep it,
        and write the traces kept to `<file>.<index>` once `count` traces were collected or every
        `log_frequency` traces. They are kept formatted: a trace kept raw until its batch is written
        would live long enough to be promoted to the collector's older generations, which grow the
        collections of everything that lives there."""
        records = self.file.format(traces) if traces else b""
        with self._lock:
            self._in_flight -= 1
            if records:
                self._stream.append(records)
            self._in_stream += 1
            self._collected += 1
            full = (self.count == 0 and self._collected == self._sample) or (
                self.log_frequency != 0 and self._in_stream >= self.log_frequency
            )
            batch = self._take() if full else None
            finished = self._retired and self._in_flight == 0
        if batch:
            self.file.save(batch, indexed=True)
        if finished:
            self.flush()

    def _take(self) -> list[bytes]:
        batch = self._stream
        self._stream = []
        self._in_stream = 0
        return batch

    def retire(self) -> None:
        """Replaced by an update: write what is kept once the traces sampled under it have finished."""
        with self._lock:
            self._retired = True
            finished = self._in_flight == 0
        if finished:
            self.flush()

    def flush(self) -> None:
        """Write the traces kept: to `<file>.<index>` with a log frequency, else to the file itself."""
        with self._lock:
            if self.mode != "triton" or not self._in_stream:
                return
            batch = self._take()
        self.file.save(batch, indexed=self.log_frequency != 0)


@dataclass(frozen=True)
class SettingUpdate:
    """New values of a trace setting update: a field absent is left as it is, None clears it."""

    level: int | None = None
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    cleared: frozenset[str] = frozenset()  # fields to clear: the setting falls back to the global value
