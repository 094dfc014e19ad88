"""A run of traces with one layout is written at once by numpy; it must give the very bytes that formatting
each trace on its own gives, and Triton's records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nereid.tracing.records import Layout, TraceFormatter

NAMES = ("HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "REQUEST_END", 'odd "%d"')


def _one_by_one(layout: Layout, values: np.ndarray) -> bytes:
    return b"".join(layout.one(row) + b"," for row in values.tolist())


@pytest.mark.parametrize(
    "key",
    [
        (("add_sub", 1, "", 2), False, *NAMES),
        (('a "%s" model', 3, "", 0), True, *NAMES),  # a parent's id: its column before the timestamps'
        (("m", 1, "req-1", 1), True, *NAMES),
        (None, False, *NAMES),
    ],
)
@pytest.mark.parametrize("first", [1, 95, 100, 9990, 10**17])  # ids of one width, and ids crossing one
def test_a_run_at_once_is_the_traces_one_by_one(key: tuple[object, ...], first: int) -> None:
    layout = Layout(key)
    count = 40
    rng = np.random.default_rng(first)
    values = np.empty((count, layout.width), dtype=np.int64)
    values[:, 0] = np.arange(first, first + count)
    values[:, 1:] = rng.integers(22_000_000_000_000, 22_000_900_000_000, (count, layout.width - 1))
    if layout.width > len(NAMES) + 1:
        values[:, 1] = 7  # the parent's id, narrower than the timestamps
    values[5, -1] = 0  # a zero is one digit wide: the run goes trace by trace
    rows = bytes(layout.rows(values))
    assert rows == _one_by_one(layout, values)
    values[5, -1] = values[4, -1]
    rows = bytes(layout.rows(values))
    assert rows == _one_by_one(layout, values)
    records = json.loads(b"[" + rows[:-1] + b"]")
    stamps = [r for r in records if "timestamps" in r]
    assert len(stamps) == count * len(NAMES)
    assert stamps[0] == {"id": first, "timestamps": [{"name": NAMES[0], "ns": int(values[0, -len(NAMES)])}]}
    assert stamps[-1]["timestamps"][0] == {"name": 'odd "%d"', "ns": int(values[-1, -1])}
    heads = [r for r in records if "model_name" in r]
    if key[0] is not None:
        assert [r["id"] for r in heads] == list(range(first, first + count))
        assert all(("parent_id" in r) == key[1] for r in heads)
        assert all(("request_id" in r) == bool(key[0][2]) for r in heads)  # type: ignore[index]


def test_a_batch_keeps_the_order_of_its_traces_across_layouts_and_tensors() -> None:
    formatter = TraceFormatter()
    short, long_ = formatter.layout((None, False, "A")), formatter.layout((None, False, "A", "B"))
    kept: list[Layout | bytes] = []
    values: list[int] = []
    expected = []
    for index in range(60):
        layout = short if index % 20 < 10 else long_
        kept.append(layout)
        row = [index + 1000, *range(10**13 + index, 10**13 + index + layout.width - 1)]
        values += row
        expected.append(layout.one(row))
        if index == 30:
            kept.append(b'{"id":1030,"activity":"TENSOR_QUEUE_INPUT"}')
            expected.append(kept[-1])
    assert b"".join(formatter.batch(kept, values)) == b",".join(expected)


def test_ids_that_reach_another_width_are_written_in_runs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose ids reach 1000 (or every trace of a run, written at shutdown) is formatted by numpy
    in runs of rows whose numbers have as many digits, not trace by trace."""
    layout = Layout((("add_sub", 1, "", 0), False, *NAMES))
    count = 120
    values = np.empty((count, layout.width), dtype=np.int64)
    values[:, 0] = np.arange(940, 940 + count)  # 60 ids of three digits, then 60 of four
    values[:, 1:] = np.arange(count * len(NAMES)).reshape(count, -1) + 10**12
    values[100:, 3] += 10**13  # and a timestamp column wider from row 100 on
    expected = _one_by_one(layout, values)

    def refused(self: Layout, row: object) -> bytes:
        raise AssertionError("a run of rows alike was formatted trace by trace")

    monkeypatch.setattr(Layout, "one", refused)
    assert bytes(layout.rows(values)) == expected
