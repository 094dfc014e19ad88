"""The ONNX Runtime session options a model's config sets: Triton's `execution_mode`,
`intra_op_thread_count` and `inter_op_thread_count` parameters, and the graph optimization level."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import onnxruntime as ort

from nereid.core.engine import Engine
from tests.backends.serving import failure, model_dir, serving
from tests.conftest import EXAMPLES


def _model(root: Path, name: str, parameters: dict[str, str], extra: str = "") -> None:
    config = (
        'backend: "onnxruntime"\n'
        + extra
        + "".join(
            f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
            for key, value in parameters.items()
        )
    )
    shutil.copy(EXAMPLES / "simple" / "1" / "model.onnx", model_dir(root, name, config) / "model.onnx")


def _options(engine: Engine, name: str) -> Any:
    """The session options each instance of the model runs with (all alike)."""
    instances = engine.models.get(name).scheduler.pool.instances  # type: ignore[attr-defined]
    options = [instance._session.get_session_options() for instance in instances]
    assert len({(o.execution_mode, o.intra_op_num_threads, o.inter_op_num_threads) for o in options}) == 1
    return options[0]


def test_execution_mode_runs_nodes_in_sequence_or_in_parallel(tmp_path: Path) -> None:
    _model(tmp_path, "default", {})
    _model(tmp_path, "sequential", {"execution_mode": "0"})
    _model(tmp_path, "parallel", {"execution_mode": "1"})
    _model(tmp_path, "two", {"execution_mode": "2"})
    _model(tmp_path, "words", {"execution_mode": "parallel"})
    with serving(tmp_path) as engine:
        assert _options(engine, "default").execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
        assert _options(engine, "sequential").execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
        assert _options(engine, "parallel").execution_mode == ort.ExecutionMode.ORT_PARALLEL
        assert "parameter 'execution_mode' must be 0 (sequential) or 1 (parallel), got 2" in failure(
            engine, "two"
        )
        assert "parameter 'execution_mode' must be an integer, got 'parallel'" in failure(engine, "words")


def test_thread_counts_as_given_else_the_cores_shared_among_the_instances(tmp_path: Path) -> None:
    three = "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
    _model(tmp_path, "shared", {}, three)
    _model(tmp_path, "given", {"intra_op_thread_count": "3", "inter_op_thread_count": "2"}, three)
    _model(tmp_path, "ort_picks", {"intra_op_thread_count": "0", "inter_op_thread_count": "0"})
    _model(tmp_path, "bad", {"inter_op_thread_count": "two"})
    share = max(1, len(os.sched_getaffinity(0)) // 3)
    with serving(tmp_path) as engine:
        shared = _options(engine, "shared")
        assert (shared.intra_op_num_threads, shared.inter_op_num_threads) == (share, 0)
        given = _options(engine, "given")
        assert (given.intra_op_num_threads, given.inter_op_num_threads) == (3, 2)
        ort_picks = _options(engine, "ort_picks")  # Triton's 0: ORT's own count
        assert (ort_picks.intra_op_num_threads, ort_picks.inter_op_num_threads) == (0, 0)
        assert "parameter 'inter_op_thread_count' must be an integer, got 'two'" in failure(engine, "bad")
        # idle pool threads sleep rather than spin, leaving the cores to the server and the other instances
        for options in (shared, given, ort_picks):
            assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
            assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"


def test_graph_optimization_levels_as_triton_numbers_them(tmp_path: Path) -> None:
    levels = {"all": "", "basic": "-1", "extended": "1", "none": "2"}
    for name, level in levels.items():
        _model(tmp_path, name, {}, f"optimization {{ graph {{ level: {level} }} }}\n" if level else "")
    with serving(tmp_path) as engine:
        assert {name: _options(engine, name).graph_optimization_level.name for name in levels} == {
            "all": "ORT_ENABLE_ALL",
            "basic": "ORT_ENABLE_BASIC",
            "extended": "ORT_ENABLE_EXTENDED",
            "none": "ORT_DISABLE_ALL",
        }
