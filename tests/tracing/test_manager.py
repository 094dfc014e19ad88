"""Trace settings as the trace extension updates them, sampling by rate and count, and the trace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nereid.tracing import SettingUpdate, TraceManager
from nereid.tracing.config import LEVEL_OFF, LEVEL_TENSORS, LEVEL_TIMESTAMPS, TraceConfig


def _manager(tmp_path: Path, **values: object) -> TraceManager:
    fields: dict[str, object] = {"level": LEVEL_TIMESTAMPS, "rate": 1, "file": str(tmp_path / "trace.json")}
    fields.update(values)
    return TraceManager(TraceConfig(**fields))  # type: ignore[arg-type]


def _answer(manager: TraceManager, model: str = "") -> dict[str, object]:
    return dict(manager.setting(model))


def _trace_one(manager: TraceManager, model: str = "m") -> bool:
    trace = manager.sample(model)
    if trace is None:
        return False
    trace.request_start(model, 1, "", 1)
    trace.close()
    return True


def test_answer_lists_tritons_settings(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    assert manager.setting("m") == [
        ("trace_level", ["TIMESTAMPS"]),
        ("trace_rate", "1"),
        ("trace_count", "-1"),
        ("log_frequency", "0"),
        ("trace_file", str(tmp_path / "trace.json")),
        ("trace_mode", "triton"),
    ]


def test_model_setting_overrides_and_falls_back_to_global(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.update("simple", SettingUpdate(rate=12, log_frequency=34))
    manager.update("", SettingUpdate(rate=56, count=78, level=LEVEL_OFF))
    # the model keeps what it specified and follows the global level
    assert _answer(manager, "simple")["trace_rate"] == "12"
    assert _answer(manager, "simple")["trace_level"] == ["OFF"]
    # clearing global fields goes back to the start-up values
    manager.update("", SettingUpdate(cleared=frozenset({"rate", "count"})))
    assert (_answer(manager)["trace_rate"], _answer(manager)["trace_count"]) == ("1", "-1")
    # clearing a model field falls back to the global value
    manager.update("simple", SettingUpdate(cleared=frozenset({"rate", "level"})))
    simple = _answer(manager, "simple")
    assert (simple["trace_rate"], simple["log_frequency"], simple["trace_level"]) == ("1", "34", ["OFF"])
    # a model left with nothing of its own follows the global setting again
    manager.update("simple", SettingUpdate(cleared=frozenset({"log_frequency"})))
    assert _answer(manager, "simple") == _answer(manager)


def test_invalid_settings_are_refused_unless_tracing_is_off(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    with pytest.raises(ValueError, match="invalid trace setting :sample rate must be non-zero"):
        manager.update("", SettingUpdate(rate=0))
    manager.update("", SettingUpdate(rate=0, level=LEVEL_OFF))
    assert not manager.active
    no_file = _manager(tmp_path, file="")
    with pytest.raises(ValueError, match="trace file name is not given"):
        no_file.update("", SettingUpdate(rate=3))


def test_rate_samples_one_request_in_n(tmp_path: Path) -> None:
    manager = _manager(tmp_path, rate=3)
    assert [_trace_one(manager) for _ in range(7)] == [False, False, True, False, False, True, False]


def test_count_stops_sampling_and_writes_an_indexed_file(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.update("", SettingUpdate(count=2))
    assert [_trace_one(manager) for _ in range(4)] == [True, True, False, False]
    assert _answer(manager)["trace_count"] == "0"
    written = json.loads((tmp_path / "trace.json.0").read_text())
    assert [r["id"] for r in written if "model_name" in r] == [1, 2]


def test_log_frequency_writes_every_n_traces_then_the_rest_at_shutdown(tmp_path: Path) -> None:
    manager = _manager(tmp_path, log_frequency=2)
    for _ in range(5):
        assert _trace_one(manager)
    manager.close()
    files = [json.loads((tmp_path / f"trace.json.{i}").read_text()) for i in range(3)]
    assert [len([r for r in f if "model_name" in r]) for f in files] == [2, 2, 1]
    assert not (tmp_path / "trace.json").exists()


def test_without_log_frequency_traces_go_to_the_file_at_shutdown(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    for _ in range(3):
        _trace_one(manager)
    manager.update("", SettingUpdate(count=5))  # the replaced setting writes what it kept
    _trace_one(manager)
    manager.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    assert [r["id"] for r in records if "model_name" in r] == [1, 2, 3, 4]


def test_children_share_the_trace_and_name_their_parent(tmp_path: Path) -> None:
    manager = _manager(tmp_path, level=LEVEL_TIMESTAMPS | LEVEL_TENSORS)
    root = manager.sample("ensemble")
    assert root is not None
    root.request_start("ensemble", 1, "req", 10)
    child = root.child()
    child.request_start("step", 1, "req", 11)
    root.close()  # the child still runs: nothing is written yet
    manager.update("", SettingUpdate(rate=2))
    assert not (tmp_path / "trace.json").exists()
    child.request_end()
    child.close()
    manager.close()
    records = json.loads((tmp_path / "trace.json").read_text())
    heads = [r for r in records if "model_name" in r]
    assert heads == [
        {"id": 1, "model_name": "ensemble", "model_version": 1, "request_id": "req"},
        {"id": 2, "model_name": "step", "model_version": 1, "request_id": "req", "parent_id": 1},
    ]


def test_off_samples_nothing_and_costs_one_flag(tmp_path: Path) -> None:
    manager = _manager(tmp_path, level=LEVEL_OFF)
    assert not manager.active
    assert manager.sample("m") is None
    manager.update("m", SettingUpdate(level=LEVEL_TIMESTAMPS))
    assert manager.active
    assert manager.sample("m") is not None
    assert manager.sample("other") is None
