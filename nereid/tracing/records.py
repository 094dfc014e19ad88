"""Triton's trace file records, written from the raw values that traces keep.

A trace's records follow a layout: fixed text with its values (the trace's id, its parent's id, its
timestamps' ns) in between. The layout depends only on the model, whether the trace has a parent, and the
sequence of its timestamps' names, and the same few recur, so each is made once. A setting keeps each
closed trace as its layout and its values, ints in one flat list, and writes them every `log-frequency`
traces: a run of traces with one layout is written at once, their numbers turned into digits by numpy
and laid into rows of the layout's text, with no Python work per number.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import orjson

if TYPE_CHECKING:
    from nereid.tracing.trace import RequestTrace

# A layout's key: the model's record (name, version, request id, timestamps before it) or None, whether
# the trace names a parent, then its timestamps' names.
LayoutKey = tuple[object, ...]

# Where a `%` template takes its trace's id: a byte JSON text never holds raw (orjson escapes control
# characters), so neither a name nor a request id can be mistaken for it.
_ID = b"\x00"

# Runs shorter than this are formatted trace by trace: numpy's set-up would cost more.
_VECTOR_FROM = 16

# '0000' .. '9999', the four ASCII digits of each in one uint32: numbers become digits four at a time.
# 10, 100, ... 10**18: how many of them a non-negative int64 reaches is one less than its digits.
_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)

_DIGITS4 = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), dtype=np.uint32)


class Layout:
    """The records of traces of one key: `pieces[i]`, then the value of column `columns[i]`, ..., then
    `pieces[-1]`, and a comma. Column 0 is the trace's id, column 1 its parent's id (with a parent),
    then the ns of each timestamp."""

    __slots__ = ("width", "pieces", "columns", "template", "_order", "_rows")

    def __init__(self, key: LayoutKey) -> None:
        head, parent, *names = key
        first = 2 if parent else 1  # the column of the first timestamp
        parts: list[bytes | int] = []  # text and columns, in order

        def stamps(start: int, stop: int) -> None:
            for index in range(start, stop):
                name = orjson.dumps(names[index])
                parts.extend(
                    (b'{"id":', 0, b',"timestamps":[{"name":' + name + b',"ns":', first + index, b"}]},")
                )

        before = 0
        if head is not None:
            model_name, version, request_id, before = cast("tuple[str, int, str, int]", head)
            stamps(0, before)
            parts.extend(
                (b'{"id":', 0, b',"model_name":%s,"model_version":%d' % (orjson.dumps(model_name), version))
            )
            if request_id:
                parts.append(b',"request_id":' + orjson.dumps(request_id))
            if parent:
                parts.extend((b',"parent_id":', 1))
            parts.append(b"},")
        stamps(before, len(names))
        pieces: list[bytes] = []
        columns: list[int] = []
        text = b""
        for part in parts:
            if isinstance(part, int):
                pieces.append(text)
                columns.append(part)
                text = b""
            else:
                text += part
        pieces.append(text[:-1])  # no comma after the last record: `rows` adds one where rows follow
        self.pieces = pieces
        self.columns = columns
        self.width = first + len(names)  # values a trace of this layout keeps
        # trace by trace: the id put in by one replace of its placeholder, the other values by one `%`
        self.template = b"".join(
            piece.replace(b"%", b"%%") + (_ID if column == 0 else b"%d")
            for piece, column in itertools.zip_longest(pieces, columns)
            if column is not None
        ) + pieces[-1].replace(b"%", b"%%")
        # the columns in the template's order, where it differs from theirs (a parent's id after timestamps)
        order = [column for column in columns if column]
        self._order = None if order == sorted(order) else order
        self._rows: dict[tuple[int, ...], tuple[np.ndarray, list[tuple[int, int, int]]]] = {}

    def one(self, values: Sequence[int]) -> bytes:
        """The records of one trace, from its values."""
        order = self._order
        rest = tuple(values[1:]) if order is None else tuple([values[column] for column in order])
        return self.template.replace(_ID, b"%d" % values[0]) % rest

    def rows(self, values: np.ndarray) -> bytes | np.ndarray:
        """The records of traces whose values are `values` (one row each), each followed by a comma: bytes,
        or the bytes of a numpy array, which a file writes with no copy."""
        count = len(values)
        if count < _VECTOR_FROM or values.min() < 0:
            return b"".join([self.one(row) + b"," for row in values.tolist()])
        # The digits of each column's numbers, when they all have as many; else runs of rows alike.
        low = [len(str(n)) for n in values.min(axis=0).tolist()]
        high = [len(str(n)) for n in values.max(axis=0).tolist()]
        if low != high:
            varying = [column for column, (a, b) in enumerate(zip(low, high, strict=True)) if a != b]
            return self._runs(values, varying)
        widths = tuple(low)
        text, spans = self._text(widths)
        # Every number's digits, four at a time from the table, the last ones of a number's `4 * chunks`
        # the ones it has: one contiguous array, and one numpy call a chunk for the whole run.
        chunks = (max(widths) + 3) // 4
        numbers = values.reshape(-1)
        digits = np.empty((len(numbers), chunks), dtype=np.uint32)
        for chunk in range(chunks - 1, -1, -1):
            quotient = numbers // 10000  # by a constant: numpy divides by multiplying
            digits[:, chunk] = _DIGITS4.take(numbers - quotient * 10000)
            numbers = quotient
        digits8 = digits.view(np.uint8).reshape(count, self.width, chunks * 4)
        out = np.empty((count, len(text)), dtype=np.uint8)
        out[:] = text
        end = chunks * 4
        for column, start, stop in spans:
            out[:, start:stop] = digits8[:, column, end - (stop - start) :]
        return out.reshape(-1)

    def _runs(self, values: np.ndarray, varying: list[int]) -> np.ndarray:
        """`rows` of traces whose numbers in the columns `varying` do not all have as many digits (ids
        that reach 1000 within a batch; a whole run's traces when they are written at shutdown): each run
        of consecutive rows alike at once, in their order."""
        digits = np.searchsorted(_POWERS, values[:, varying], side="right")  # one less than each's digits
        starts = np.flatnonzero((digits[1:] != digits[:-1]).any(axis=1)) + 1
        bounds = [0, *starts.tolist(), len(values)]
        parts = [self.rows(values[start:stop]) for start, stop in zip(bounds, bounds[1:], strict=False)]
        return np.concatenate([np.frombuffer(p, np.uint8) if isinstance(p, bytes) else p for p in parts])

    def _text(self, widths: tuple[int, ...]) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """A row's fixed text for these column widths (zeros where digits go), and where each value goes."""
        made = self._rows.get(widths)
        if made is None:
            row = bytearray()
            spans = []
            for piece, column in zip(self.pieces, self.columns, strict=False):
                row += piece
                spans.append((column, len(row), len(row) + widths[column]))
                row += bytes(widths[column])
            row += self.pieces[-1] + b","
            made = self._rows[widths] = (np.frombuffer(bytes(row), dtype=np.uint8), spans)
        return made


class TraceFormatter:
    """The layouts of one trace file's traces, made once each; writes batches of kept traces."""

    def __init__(self) -> None:
        self.layouts: dict[LayoutKey, Layout] = {}

    def layout(self, key: LayoutKey) -> Layout:
        layout = self.layouts.get(key)
        if layout is None:
            layout = Layout(key)
            if key[0] is None or not key[0][2]:  # type: ignore[index]
                self.layouts[key] = layout  # a request id's layout is its own: not kept
        return layout

    def records(self, traces: Sequence[RequestTrace]) -> bytes:
        """The records of `traces` now, comma-separated (the inside of a JSON array)."""
        kept: list[Layout | bytes] = []
        values: list[int] = []
        for trace in traces:
            keep(self, trace, kept, values)
        return b"".join(buffers(self.batch(kept, values))) if kept else b""

    def batch(self, kept: Sequence[Layout | bytes], values: list[int]) -> list[bytes | np.ndarray]:
        """The records of the traces kept (not none), comma-separated, in pieces to write one after the
        other: each layout, the next `width` values, and the records of bytes kept as they are (tensors,
        which are formatted when they are taken)."""
        array = np.fromiter(values, np.int64, len(values))  # fewer instructions a number than np.array
        first = kept[0]
        if not isinstance(first, bytes) and kept.count(first) == len(kept):  # one run: the common batch
            return [first.rows(array.reshape(len(kept), first.width))[:-1]]
        parts: list[bytes | np.ndarray] = []
        at = 0
        for layout, run in itertools.groupby(kept):
            if isinstance(layout, bytes):
                parts.extend(cast(bytes, record) + b"," for record in run)
                continue
            count = len(list(run))
            end = at + count * layout.width
            parts.append(layout.rows(array[at:end].reshape(count, layout.width)))
            at = end
        parts[-1] = parts[-1][:-1]  # no comma after the last record
        return parts


def keep(
    formatter: TraceFormatter, trace: RequestTrace, kept: list[Layout | bytes], values: list[int]
) -> None:
    """Add a closed trace to what a setting keeps: its layout and values, and its tensors' records."""
    stamps = trace.stamps or ()
    head = trace.head
    if stamps or head is not None:
        parent = trace.parent_id
        key = (head, parent != 0, *stamps[0::2])
        kept.append(formatter.layouts.get(key) or formatter.layout(key))
        values.append(trace.id)
        if parent:
            values.append(parent)
        values += stamps[1::2]  # type: ignore[arg-type]
    if trace.tensors:
        kept.append(b",".join(trace.tensors))


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


def buffers(pieces: Sequence[bytes | np.ndarray]) -> Sequence[bytes]:
    """Pieces to join or write as they are: a numpy array is a buffer too, which numpy's stubs do not say."""
    return cast("Sequence[bytes]", pieces)
