"""The ONNX Runtime session options a model's config sets: Triton's `execution_mode`,
`intra_op_thread_count` and `inter_op_thread_count` parameters, and the graph optimization level."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import onnxruntime as ort

from nereid.engine import Engine
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
