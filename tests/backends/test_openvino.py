"""OpenVINO models built here (IR and ONNX), served, and compared with OpenVINO itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.backends.serving import execute_together, failure, infer, model_dir, outputs_of, serving

ov = pytest.importorskip("openvino")
ops = pytest.importorskip("openvino.opset13")

WEIGHT = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def _model(batch: int = -1) -> ov.Model:
    """x [batch, 4] -> scores [batch, 3] and the size of the batch it ran in [batch, 1]."""
    x = ops.parameter([batch, 4], np.float32, name="x")
    scores = ops.matmul(x, ops.constant(WEIGHT), False, False)
    scores.output(0).get_tensor().set_names({"scores"})
    rows = ops.gather(
        ops.shape_of(x, "i64"), ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0))
    )
    batch_size = ops.broadcast(rows, ops.concat([rows, ops.constant(np.array([1], np.int64))], 0))
    batch_size.output(0).get_tensor().set_names({"batch"})
    return ov.Model([scores, batch_size], [x], "scorer")


def _direct(x: np.ndarray, path: Path) -> np.ndarray:
    """OpenVINO itself on the same file (IR files keep their weights in FP16 unless told otherwise)."""
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU")
    return compiled({"x": x})[compiled.output("scores")]


WRITTEN = """
backend: "openvino"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [
  { name: "scores" data_type: TYPE_FP32 dims: [3] },
  { name: "batch" data_type: TYPE_INT64 dims: [1] }
]
dynamic_batching {}
parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }
"""


def test_ir_written_auto_completed_and_static_batch(tmp_path: Path) -> None:
    ov.save_model(_model(), str(model_dir(tmp_path, "written", WRITTEN) / "model.xml"))
    ov.save_model(_model(), str(model_dir(tmp_path, "auto", 'backend: "openvino"') / "model.xml"))
    # An IR with its batch fixed at 1 is made dynamic for max_batch_size.
    ov.save_model(_model(batch=1), str(model_dir(tmp_path, "static", WRITTEN) / "model.xml"))
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    expected = _direct(x, tmp_path / "auto" / "1" / "model.xml")
    with serving(tmp_path) as engine:
        config = engine.model_config("auto")
        assert config["max_batch_size"] == 4 and "dynamic_batching" in config
        assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("x", "TYPE_FP32", [4])]
        assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
            ("scores", "TYPE_FP32", [3]),
            ("batch", "TYPE_INT64", [1]),
        ]
        for name in ("written", "auto", "static"):
            outputs = infer(engine, name, {"x": x})
            np.testing.assert_allclose(outputs["scores"], expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(outputs["batch"], [[3]] * 3)
        batches = [x[:1], x[1:], x]
        results = execute_together(engine, "written", [{"x": b} for b in batches])
        for batch, result in zip(batches, results, strict=True):
            np.testing.assert_allclose(
                outputs_of(result)["scores"],
                _direct(batch, tmp_path / "written" / "1" / "model.xml"),
                rtol=1e-5,
                atol=1e-5,
            )
            np.testing.assert_array_equal(outputs_of(result)["batch"], [[6]] * len(batch))


def test_onnx_through_openvino(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["scores"])],
        "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(WEIGHT, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    folder = model_dir(tmp_path, "onnx", 'backend: "openvino"\ndefault_model_filename: "model.onnx"')
    onnx.save(model, str(folder / "model.onnx"))
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    with serving(tmp_path) as engine:
        assert engine.model_config("onnx")["max_batch_size"] == 4
        np.testing.assert_allclose(
            infer(engine, "onnx", {"x": x})["scores"], _direct(x, folder / "model.onnx"), rtol=1e-5, atol=1e-5
        )


def test_bad_configs_are_refused(tmp_path: Path) -> None:
    wrong = WRITTEN.replace(
        'name: "scores" data_type: TYPE_FP32 dims: [3]', 'name: "scores" data_type: TYPE_FP32 dims: [5]'
    )
    ov.save_model(_model(), str(model_dir(tmp_path, "wrong_dims", wrong) / "model.xml"))
    gpu = WRITTEN + "instance_group [{ kind: KIND_GPU }]"
    ov.save_model(_model(), str(model_dir(tmp_path, "gpu", gpu) / "model.xml"))
    with serving(tmp_path) as engine:
        assert "output 'scores' has dims [5] in the configuration" in failure(engine, "wrong_dims")
        assert "asks for KIND_GPU, but OpenVINO has no CUDA device" in failure(engine, "gpu")


def test_batch_padding_serves_a_fixed_batch_model(tmp_path: Path) -> None:
    # one request at a time (no dynamic batcher), each smaller than the model's batch of 4
    config = WRITTEN.replace("max_batch_size: 8", "max_batch_size: 4").replace("dynamic_batching {}", "") + (
        'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n'
    )
    ov.save_model(_model(batch=4), str(model_dir(tmp_path, "padded", config) / "model.xml"))
    # Without padding the model still loads, as in Triton: its fixed first dimension is the batch.
    fixed = config.replace("ENABLE_BATCH_PADDING", "SKIP_OV_DYNAMIC_BATCHSIZE")
    ov.save_model(_model(batch=4), str(model_dir(tmp_path, "fixed", fixed) / "model.xml"))
    x = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)
    expected = _direct(x, tmp_path / "padded" / "1" / "model.xml")
    with serving(tmp_path) as engine:
        for rows in (1, 3, 4):
            outputs = infer(engine, "padded", {"x": x[:rows]})
            np.testing.assert_allclose(outputs["scores"], expected[:rows], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(outputs["batch"], [[4]] * rows)  # ran padded to the fixed batch
        np.testing.assert_allclose(infer(engine, "fixed", {"x": x})["scores"], expected, rtol=1e-5, atol=1e-5)
