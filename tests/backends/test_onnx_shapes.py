"""The ONNX Runtime backend's shape rules: scalar tensors given as dims of 1s in the configuration, ragged
inputs, batch inputs the configuration need not list, and the texts of its config checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.backends.serving import failure, infer, model_dir, serving

onnx = pytest.importorskip("onnx")
helper = onnx.helper


def _identity_model(path: Path, shape: list, out_shape: list | None = None) -> None:
    """INPUT -> Identity -> OUTPUT, FP32, of the given shape ([]: scalar)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        "identity",
        [helper.make_tensor_value_info("INPUT", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT", onnx.TensorProto.FLOAT, out_shape or shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


def _config(dims: str, max_batch_size: int = 0, extra: str = "") -> str:
    return (
        f'backend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: {dims} {extra} }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: {dims} }} ]\n'
    )


def test_scalar_models_take_dims_of_ones_and_refuse_others(tmp_path: Path) -> None:
    for name, dims in (("one", "[ 1 ]"), ("one_one", "[ 1, 1 ]"), ("two", "[ 2 ]")):
        _identity_model(model_dir(tmp_path, name, _config(dims)) / "model.onnx", [])
    with serving(tmp_path) as engine:
        assert infer(engine, "one", {"INPUT": np.array([3], np.float32)})["OUTPUT"].tolist() == [3.0]
        assert infer(engine, "one_one", {"INPUT": np.array([[4]], np.float32)})["OUTPUT"].tolist() == [[4.0]]
        assert "scalar tensor 'INPUT', should only provide 1 in the model configuration" in failure(
            engine, "two"
        )


def _column_model(path: Path) -> None:
    """A ragged model: INPUT [-1] (the whole batch's elements) -> OUTPUT [-1, 1], one row per element."""
    axes = helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [helper.make_node("Unsqueeze", ["INPUT", "axes"], ["OUTPUT"])],
        "column",
        [helper.make_tensor_value_info("INPUT", onnx.TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT", onnx.TensorProto.FLOAT, ["n", 1])],
        initializer=[axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


RAGGED = (
    'backend: "onnxruntime"\nmax_batch_size: 4\n'
    'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
    'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]\n'
)


def test_ragged_inputs_are_checked_and_joined_and_scatter_outputs_split(tmp_path: Path) -> None:
    _column_model(model_dir(tmp_path, "flat", RAGGED) / "model.onnx")
    square = _config("[ -1 ]", 4, "allow_ragged_batch: true")
    _identity_model(model_dir(tmp_path, "square", square) / "model.onnx", [-1, -1])
    with serving(tmp_path) as engine:
        assert "ragged input 'INPUT', model provides [-1,-1]" in failure(engine, "square")
        assert infer(engine, "flat", {"INPUT": np.array([[1, 2, 3]], np.float32)})["OUTPUT"].tolist() == [
            [1, 2, 3]
        ]


def test_one_execution_joins_the_ragged_requests_of_a_batch(tmp_path: Path) -> None:
    from tests.backends.serving import execute_together

    _column_model(model_dir(tmp_path, "flat", RAGGED) / "model.onnx")
    with serving(tmp_path) as engine:
        batches = [{"INPUT": np.array([[1, 2]], np.float32)}, {"INPUT": np.array([[3, 4, 5]], np.float32)}]
        results = execute_together(engine, "flat", batches)
    assert [r["OUTPUT"].tolist() for r in results] == [[[1, 2]], [[3, 4, 5]]]  # type: ignore[index]


def _two_input_model(path: Path) -> None:
    """INPUT [-1, 3] + LENGTHS [-1] -> OUTPUT [-1, 3] (LENGTHS only reaches a second output)."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["INPUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["LENGTHS"], ["L"]),
        ],
        "two",
        [
            helper.make_tensor_value_info("INPUT", onnx.TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("LENGTHS", onnx.TensorProto.INT32, ["n"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", onnx.TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("L", onnx.TensorProto.INT32, ["n"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


_OUTPUT = 'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'


def test_config_checks_name_the_tensor_and_what_the_model_expects(tmp_path: Path) -> None:
    configs = {
        "wrong_dims": 'max_batch_size: 4\ninput [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        "unbatched": 'max_batch_size: 0\ninput [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n',
        "unknown": 'max_batch_size: 4\ninput [ { name: "OTHER" data_type: TYPE_FP32 dims: [ 3 ] } ]\n',
        # the server computes batch inputs, so the config lists LENGTHS as a batch input, not as an input
        "batch_input": (
            'max_batch_size: 4\ninput [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "LENGTHS" data_type: TYPE_INT32 '
            'source_input: "INPUT" } ]\n'
        ),
    }
    for name, config in configs.items():
        _two_input_model(
            model_dir(tmp_path, name, 'backend: "onnxruntime"\n' + config + _OUTPUT) / "model.onnx"
        )
    with serving(tmp_path) as engine:
        assert (
            "input 'INPUT' has dims [4] in the configuration (after the batch dimension) but the model "
            "expects [3]" in failure(engine, "wrong_dims")
        )
        assert "max_batch_size is 0" not in failure(engine, "unbatched")
        assert "input 'INPUT' has dims [3] in the configuration" in failure(engine, "unbatched")
        assert "unexpected input 'OTHER' in the configuration" in failure(engine, "unknown")
        result = infer(engine, "batch_input", {"INPUT": np.ones((2, 3), np.float32)})
        assert result["OUTPUT"].shape == (2, 3)


def test_without_auto_complete_the_config_lists_every_model_input(tmp_path: Path) -> None:
    config = 'backend: "onnxruntime"\nmax_batch_size: 4\ninput [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    _two_input_model(model_dir(tmp_path, "missing", config + _OUTPUT) / "model.onnx")
    with serving(tmp_path, auto_complete_config=False) as engine:
        assert "the configuration does not list model inputs ['LENGTHS']" in failure(engine, "missing")
