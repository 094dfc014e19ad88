"""Traces on the request path keep raw values only; a closed trace is kept as its layout and ints, and
formatted as Triton's trace records with its batch."""

from __future__ import annotations

import gc
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nereid.tracing import TraceManager
from nereid.tracing import settings as settings_module
from nereid.tracing import trace as trace_module
from nereid.tracing.config import LEVEL_TENSORS, LEVEL_TIMESTAMPS, TraceConfig
from nereid.tracing.records import TraceFormatter
from nereid.tracing.settings import SettingUpdate
from nereid.tracing.trace import PlainTrace, RequestTrace
from nereid.types import InferTensor
from tests.tracing.test_trace_file import MODEL_ORDER


def _manager(tmp_path: Path, **values: Any) -> TraceManager:
    fields: dict[str, Any] = {"level": LEVEL_TIMESTAMPS, "rate": 1, "file": str(tmp_path / "trace.json")}
    fields.update(values)
    return TraceManager(TraceConfig(**fields))


def _sample(manager: TraceManager, model: str = "m") -> RequestTrace:
    trace = manager.sample(model)
    assert trace is not None
    return trace


def _records(data: bytes) -> list[dict[str, Any]]:
    records = json.loads(b"[" + data + b"]")
    assert isinstance(records, list)
    return records


def _stamp(trace_id: int, name: str, ns: int) -> dict[str, Any]:
    return {"id": trace_id, "timestamps": [{"name": name, "ns": ns}]}


def test_records_have_tritons_shape_and_order(tmp_path: Path) -> None:
    """One record per timestamp, in the order taken; the model's record where the request reached its
    model (after the frontend's receive times), as Triton writes them."""
    manager = _manager(tmp_path)
    trace = _sample(manager)
    trace.timestamp("HTTP_RECV_START", 5)
    trace.timestamp("HTTP_RECV_END", 6)
    trace.request_start('a "quoted" model %d', 3, "req\n1", 10)
    trace.queue_start(11, ())
    trace.compute(12, 13, 14)
    child = trace.child()
    child.request_start("step", 1, "", 20)
    plain = _sample(manager)
    plain.timestamp("HTTP_RECV_START", 30)
    plain.request_start("m", 1, "", 31)
    plain.timestamp("HTTP_SEND_END", 32)
    records = _records(TraceFormatter().records([trace, child, plain]))
    model = {"id": 1, "model_name": 'a "quoted" model %d', "model_version": 3, "request_id": "req\n1"}
    assert records[:9] == [
        _stamp(1, "HTTP_RECV_START", 5),
        _stamp(1, "HTTP_RECV_END", 6),
        model,
        _stamp(1, "REQUEST_START", 10),
        _stamp(1, "QUEUE_START", 11),
        _stamp(1, "COMPUTE_START", 12),
        _stamp(1, "COMPUTE_INPUT_END", 12),
        _stamp(1, "COMPUTE_OUTPUT_START", 13),
        _stamp(1, "COMPUTE_END", 14),
    ]
    assert records[9:] == [
        {"id": 2, "model_name": "step", "model_version": 1, "parent_id": 1},
        _stamp(2, "REQUEST_START", 20),
        _stamp(3, "HTTP_RECV_START", 30),
        {"id": 3, "model_name": "m", "model_version": 1},
        _stamp(3, "REQUEST_START", 31),
        _stamp(3, "HTTP_SEND_END", 32),
    ]


def test_the_same_sequence_of_names_reuses_its_template_and_others_get_theirs(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    formatter = TraceFormatter()
    traces = []
    for names in (("A", "B"), ("A", "B"), ("A",), ("B", "A")):
        trace = _sample(manager)
        for index, name in enumerate(names):
            trace.timestamp(name, trace.id * 10 + index)
        traces.append(trace)
    traces[1].head = traces[2].head = ("50% %d", 2, "", 1)  # the model's record joins the template
    records = _records(formatter.records(traces))
    heads = [r for r in records if "model_name" in r]
    assert heads == [{"id": i, "model_name": "50% %d", "model_version": 2} for i in (2, 3)]
    got = [
        (r["id"], r["timestamps"][0]["name"], r["timestamps"][0]["ns"]) for r in records if "timestamps" in r
    ]
    assert got == [
        (1, "A", 10),
        (1, "B", 11),
        (2, "A", 20),
        (2, "B", 21),
        (3, "A", 30),
        (4, "B", 40),
        (4, "A", 41),
    ]
    assert formatter.records(traces) == b",".join(formatter.records([t]) for t in traces)


def test_tensor_records_follow_the_timestamps(tmp_path: Path) -> None:
    manager = _manager(tmp_path, level=LEVEL_TIMESTAMPS | LEVEL_TENSORS)
    trace = _sample(manager)
    data = np.array([[1.5, 2.0]], dtype=np.float32)
    trace.request_start("m", 1, "", 1)
    trace.queue_start(2, [InferTensor("IN", "FP32", (1, 2), data)])
    data[0, 0] = 9.0  # formatted when taken: what the model was given, whatever happens to it later
    records = _records(TraceFormatter().records([trace]))
    assert records[-1] == {
        "id": 1,
        "activity": "TENSOR_QUEUE_INPUT",
        "tensor": {"name": "IN", "data": "1.5,2", "shape": "1,2", "dtype": "FP32"},
    }


def test_a_trace_is_kept_as_ints_and_formatted_with_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of a closed trace but its layout and ints is kept until its batch is written (a raw trace
    kept that long would grow the garbage collector's older generations); the batch is formatted at once."""
    formatted: list[int] = []
    batch = TraceFormatter.batch

    def counted(self: TraceFormatter, kept: list[Any], values: list[int]) -> list[Any]:
        formatted.append(len(kept))
        return batch(self, kept, values)

    monkeypatch.setattr(TraceFormatter, "batch", counted)
    manager = _manager(tmp_path, log_frequency=3)
    for index in range(7):
        trace = _sample(manager)
        trace.request_start("m", 1, "", index)
        trace.close()
        assert formatted == [3] * ((index + 1) // 3)
        assert gc.get_referrers(trace) == []  # its setting kept its values, not the trace
        if index == 4:  # two traces kept since the first batch: not written yet
            assert [p.name for p in tmp_path.iterdir()] == ["trace.json.0"]
    manager.close()
    written = [_records(Path(f"{tmp_path}/trace.json.{i}").read_bytes()[1:-1]) for i in range(3)]
    assert [[r["id"] for r in batch if "model_name" in r] for batch in written] == [[1, 2, 3], [4, 5, 6], [7]]


def test_a_trace_is_written_as_it_was_when_it_closed(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    trace = _sample(manager)
    trace.request_start("m", 1, "", 1)
    trace.close()
    trace.now("INFER_RESPONSE_COMPLETE")  # late: the trace is released already
    trace.close()  # a second close changes nothing
    manager.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    assert [r["id"] for r in records] == [1, 1]
    assert [r["timestamps"][0]["name"] for r in records if "timestamps" in r] == ["REQUEST_START"]


def test_a_child_made_after_its_parent_closed_is_written_on_its_own(tmp_path: Path) -> None:
    manager = _manager(tmp_path, log_frequency=1)
    parent = _sample(manager)
    parent.request_start("m", 1, "", 1)
    parent.close()
    child = parent.child()
    child.request_start("c", 1, "", 2)
    child.close()
    first, second = (_records(Path(f"{tmp_path}/trace.json.{i}").read_bytes()[1:-1]) for i in range(2))
    assert [r["id"] for r in first] == [1, 1]
    assert [r["id"] for r in second] == [2, 2] and second[0]["parent_id"] == 1


def test_an_execution_left_on_the_trace_is_recorded_with_request_end_or_at_close(tmp_path: Path) -> None:
    """The instance pool leaves an execution's times on the trace; they are recorded before REQUEST_END,
    or when the trace closes if the request is never released."""
    manager = _manager(tmp_path)
    released, unreleased = _sample(manager), _sample(manager)
    for trace in (released, unreleased):
        trace.request_start("m", 1, "", 1)
        trace.executed = (2, 3, 4)
    released.request_end((), 5)
    for trace in (released, unreleased):
        trace.close()
    manager.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    stamps = [(r["id"], *r["timestamps"][0].values()) for r in records if "timestamps" in r]
    computed = [
        ("COMPUTE_START", 2),
        ("COMPUTE_INPUT_END", 2),
        ("COMPUTE_OUTPUT_START", 3),
        ("COMPUTE_END", 4),
    ]
    assert stamps == [
        (1, "REQUEST_START", 1),
        *[(1, *s) for s in computed],
        (1, "REQUEST_END", 5),
        (2, "REQUEST_START", 1),
        *[(2, *s) for s in computed],
    ]


def test_a_replaced_setting_writes_its_traces_when_the_last_sampled_under_it_ends(tmp_path: Path) -> None:
    """Every request sampled (no count): the setting counts its traces in flight with no lock, and still
    writes them once, when the last one ends after an update replaced it."""
    manager = _manager(tmp_path)
    first, second = _sample(manager), _sample(manager)
    manager.update("", SettingUpdate(rate=2))
    for trace in (first, second):
        trace.request_start("m", 1, "", trace.id)
    first.close()
    assert not (tmp_path / "trace.json").exists()  # the second is still in flight
    second.close()
    written = (tmp_path / "trace.json").read_bytes()
    assert written.startswith(b"[") and [r["id"] for r in _records(written[1:]) if "model_name" in r] == [
        1,
        2,
    ]
    manager.close()


def test_a_root_trace_is_made_as_the_constructor_makes_it(tmp_path: Path) -> None:
    """`RequestTrace.root`, the request path's constructor, sets every field as `RequestTrace()` does."""
    manager = _manager(tmp_path, level=LEVEL_TIMESTAMPS | LEVEL_TENSORS)
    setting = manager._global
    received = ("HTTP_RECV_START", 1, "HTTP_RECV_END", 2)
    ids = iter([5, 5])
    made, rooted = RequestTrace(setting, ids, 0, received), RequestTrace.root(setting, ids, received)
    for name in RequestTrace.__slots__:
        if name != "__weakref__":
            assert getattr(rooted, name) == getattr(made, name), name
    assert rooted.stamps is not received  # a list of its own


@pytest.mark.parametrize("ending", ["sent", "now", "close"])
def test_infer_response_complete_taken_as_an_attribute_is_recorded_in_its_place(
    tmp_path: Path, ending: str
) -> None:
    """A frontend leaves INFER_RESPONSE_COMPLETE on the trace (`complete`); it is recorded before the
    next timestamp (the send times), or when the trace closes unsent, once."""
    manager = _manager(tmp_path)
    trace = _sample(manager)
    trace.request_start("m", 1, "", 1)
    trace.request_end((), 2)
    trace.complete = 3
    if ending == "sent":
        trace.sent("HTTP_SEND_START", 4, "HTTP_SEND_END")
    elif ending == "now":
        trace.now("HTTP_SEND_START")
        trace.now("HTTP_SEND_END")
        trace.close()
    else:
        trace.close()
    manager.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    names = [r["timestamps"][0]["name"] for r in records if "timestamps" in r]
    tail = {
        "close": [],
        "now": ["HTTP_SEND_START", "HTTP_SEND_END"],
        "sent": ["HTTP_SEND_START", "HTTP_SEND_END"],
    }
    assert names == ["REQUEST_START", "REQUEST_END", "INFER_RESPONSE_COMPLETE", *tail[ending]]
    complete = next(
        r for r in records if r.get("timestamps", [{}])[0].get("name") == "INFER_RESPONSE_COMPLETE"
    )
    assert complete["timestamps"][0]["ns"] == 3


def test_what_a_trace_records_follows_its_settings_level(tmp_path: Path) -> None:
    manager = _manager(tmp_path, level=LEVEL_TENSORS)
    trace = _sample(manager)
    assert trace.stamps is None and trace.tensors == []
    manager.update("m", SettingUpdate(level=LEVEL_TIMESTAMPS))
    trace = _sample(manager)
    assert trace.stamps == [] and trace.tensors is None
    trace = _sample(manager, "other")  # the global setting still traces tensors only
    assert trace.stamps is None and trace.tensors == []


_RECEIVED = ("HTTP_RECV_START", 1, "HTTP_RECV_END", 2)


def _common(trace: RequestTrace) -> None:
    trace.admitted("m", 1, "", 3, 4, ())
    trace.executed = (5, 6, 7)
    trace.request_end((), 8)
    trace.complete = 9
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")


def _cache_hit(trace: RequestTrace) -> None:  # released with no execution
    trace.admitted("m", 1, "", 3, 4, ())
    trace.request_end((), 8)
    trace.complete = 9
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")


def _cancelled(trace: RequestTrace) -> None:  # answered, never sent
    trace.admitted("m", 1, "id-1", 3, 4, ())
    trace.executed = (5, 6, 7)
    trace.request_end((), 8)
    trace.complete = 9
    trace.close()


def _never_released(trace: RequestTrace) -> None:
    trace.admitted("m", 1, "", 3, 4, ())
    trace.executed = (5, 6, 7)
    trace.close()


def _failed(trace: RequestTrace) -> None:  # released before it ran, sent without a response
    trace.admitted("m", 1, "", 3, 4, ())
    trace.request_end()
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")


def _with_child(trace: RequestTrace) -> None:  # a BLS call made while it runs
    trace.admitted("m", 1, "", 3, 4, ())
    child = trace.child()
    child.admitted("bls", 2, "", 5, 6, ())
    trace.executed = (5, 6, 7)
    child.close()
    trace.request_end((), 8)
    trace.complete = 9
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")


def _streamed(trace: RequestTrace) -> None:  # a response written in pieces
    trace.admitted("m", 1, "", 3, 4, ())
    trace.executed = (5, 6, 7)
    trace.request_end((), 8)
    trace.now("HTTP_SEND_START")
    trace.now("HTTP_SEND_END")
    trace.close()


def _admitted_twice(trace: RequestTrace) -> None:
    trace.admitted("m", 1, "", 3, 4, ())
    trace.admitted("m", 1, "", 5, 6, ())
    trace.executed = (5, 6, 7)
    trace.request_end((), 8)
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")


@pytest.mark.parametrize(
    "steps",
    [_common, _cache_hit, _cancelled, _never_released, _failed, _with_child, _streamed, _admitted_twice],
)
def test_a_plain_trace_writes_what_a_request_trace_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: Any
) -> None:
    """A plain trace keeps the common way's times in fields and writes them as one row; any other way
    turns it into a RequestTrace's list first. Either way, its records are those of a RequestTrace that
    took the same steps."""
    written = []
    for make in (RequestTrace.root, PlainTrace.root):
        clock = itertools.count(100)
        monkeypatch.setattr(trace_module, "_pc", clock.__next__)
        monkeypatch.setattr(trace_module, "_perf_counter_ns", clock.__next__)
        (tmp_path / make.__qualname__).mkdir()
        manager = _manager(tmp_path / make.__qualname__)
        next(manager._global.started)  # sampled, as the manager counts it
        trace = make(manager._global, itertools.count(1), _RECEIVED)
        assert type(trace) is (PlainTrace if make is PlainTrace.root else RequestTrace)
        steps(trace)
        manager.close()
        written.append(json.loads((tmp_path / make.__qualname__ / "trace.json").read_text()))
    assert written[1] == written[0]
    assert any(r.get("model_name") == "m" for r in written[0])


def test_the_common_way_keeps_no_list_until_its_trace_is_written(tmp_path: Path) -> None:
    """Under a plain setting (every request, TIMESTAMPS, a trace file) a request with the frontend's
    receive times is traced plain; with tensors traced, or not every request sampled, it is not."""
    manager = _manager(tmp_path, log_frequency=1)
    trace = manager.sample("m", received=_RECEIVED)
    assert isinstance(trace, PlainTrace)
    trace.admitted("m", 1, "", 3, 4, ())
    trace.executed = (5, 6, 7)
    trace.request_end((), 8)
    trace.complete = 9
    assert trace.stamps is None
    trace.sent("HTTP_SEND_START", 10, "HTTP_SEND_END")
    records = json.loads((tmp_path / "trace.json.0").read_text())
    assert [r["timestamps"][0]["name"] for r in records if "timestamps" in r] == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        *MODEL_ORDER,
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]
    assert type(manager.sample("m")) is RequestTrace  # no receive times
    manager.update("m", SettingUpdate(level=LEVEL_TIMESTAMPS | LEVEL_TENSORS))
    assert type(manager.sample("m", received=_RECEIVED)) is RequestTrace
    manager.update("m", SettingUpdate(level=LEVEL_TIMESTAMPS, rate=2))
    traces = [manager.sample("m", received=_RECEIVED) for _ in range(2)]
    assert [type(t) for t in traces if t is not None] == [RequestTrace]
    manager.close()


def test_a_plain_root_trace_sets_every_field(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    trace = PlainTrace.root(manager._global, itertools.count(1), _RECEIVED)
    for name in PlainTrace.__slots__ + RequestTrace.__slots__:
        if name != "__weakref__":
            getattr(trace, name)  # set: no AttributeError
    manager.close()


def _plain(manager: TraceManager) -> PlainTrace:
    trace = manager.sample("m", received=_RECEIVED)
    assert isinstance(trace, PlainTrace)
    return trace


def _ids_written(path: Path) -> list[int]:
    return [r["id"] for r in json.loads(path.read_text()) if "model_name" in r]


def test_plain_traces_wait_sent_and_are_kept_a_few_hundred_at_a_time(tmp_path: Path) -> None:
    """A plain trace sent waits in its setting's list, with no lock taken; PLAIN_WAITING of them are
    kept at once, as rows of ints, and nothing holds them any more."""
    manager = _manager(tmp_path)
    setting = manager._global
    traces = []
    for _ in range(settings_module.PLAIN_WAITING - 1):
        trace = _plain(manager)
        _common(trace)
        traces.append(trace)
    assert setting.plain == traces and setting._kept == []
    last = _plain(manager)
    _common(last)
    assert setting.plain == [] and len(setting._kept) == settings_module.PLAIN_WAITING
    assert gc.get_referrers(last) == []
    manager.close()
    assert _ids_written(tmp_path / "trace.json") == list(range(1, settings_module.PLAIN_WAITING + 1))


def test_plain_traces_fill_each_log_frequency_file_exactly(tmp_path: Path) -> None:
    manager = _manager(tmp_path, log_frequency=3)
    for _ in range(7):
        _common(_plain(manager))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.0", "trace.json.1"]
    manager.close()
    assert [_ids_written(tmp_path / f"trace.json.{i}") for i in range(3)] == [[1, 2, 3], [4, 5, 6], [7]]


def test_plain_traces_waiting_keep_their_place_and_are_written_when_their_setting_is_replaced(
    tmp_path: Path,
) -> None:
    """A trace written on the general way after plain traces were sent follows them in the file; a
    setting replaced while plain traces wait writes them once its last trace in flight ends."""
    manager = _manager(tmp_path)
    first, general, in_flight = _plain(manager), _sample(manager), _plain(manager)
    _common(first)
    general.request_start("m", 1, "", 3)
    general.close()  # the general way: the plain trace sent before it is kept first
    later = _plain(manager)
    _common(later)
    manager.update("", SettingUpdate(rate=2))
    assert not (tmp_path / "trace.json").exists()  # `in_flight` is not sent yet
    _common(in_flight)
    assert (tmp_path / "trace.json").exists()
    manager.close()
    assert _ids_written(tmp_path / "trace.json") == [first.id, general.id, later.id, in_flight.id]


def test_a_log_frequency_file_of_plain_traces_is_written_with_its_last_trace(tmp_path: Path) -> None:
    """More traces to a file than wait at once: the file is still written when its last trace is sent,
    a general trace among them counting too."""
    frequency = settings_module.PLAIN_WAITING * 2 + 10
    manager = _manager(tmp_path, log_frequency=frequency)
    general = _sample(manager)
    general.request_start("m", 1, "", 3)
    general.close()
    for _ in range(frequency - 2):
        _common(_plain(manager))
    assert not (tmp_path / "trace.json.0").exists()
    _common(_plain(manager))
    assert len(_ids_written(tmp_path / "trace.json.0")) == frequency
    manager.close()
