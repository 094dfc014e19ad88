"""TensorFlow SavedModels and frozen GraphDefs built here, served, and compared with TensorFlow itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.backends.serving import execute_together, failure, infer, model_dir, outputs_of, serving

tf = pytest.importorskip("tensorflow")


class Scorer(tf.Module):  # type: ignore[misc]
    """Features and a string per row; scores, the string lengths, and the size of the batch it ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]))

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 4], tf.float32, name="x"),
            tf.TensorSpec([None], tf.string, name="s"),
        ]
    )
    def serve(self, x: Any, s: Any) -> dict[str, Any]:
        batch = tf.fill([tf.shape(x)[0], 1], tf.shape(x)[0])
        return {"scores": tf.matmul(x, self.weight), "length": tf.strings.length(s), "batch": batch}


def _saved_model(path: Path) -> Scorer:
    module = Scorer()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


def _frozen_graph(module: Scorer, path: Path) -> None:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(module.serve.get_concrete_function())
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())


def _inputs(rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    words = np.array([b"a" * int(n) for n in rng.integers(0, 9, rows)], dtype=np.object_)
    return {"x": rng.standard_normal((rows, 4), np.float32), "s": words}


def _direct(module: Scorer, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    result = module.serve(tf.constant(inputs["x"]), tf.constant(inputs["s"]))
    return {k: v.numpy() for k, v in result.items()}


SAVEDMODEL_CONFIG = """
platform: "tensorflow_savedmodel"
max_batch_size: 8
input [
  { name: "x" data_type: TYPE_FP32 dims: [4] },
  { name: "s" data_type: TYPE_STRING dims: [1] reshape: { shape: [] } }
]
output [
  { name: "scores" data_type: TYPE_FP32 dims: [3] },
  { name: "length" data_type: TYPE_INT32 dims: [1] reshape: { shape: [] } },
  { name: "batch" data_type: TYPE_INT32 dims: [1] }
]
dynamic_batching {}
"""


def test_savedmodel_written_and_auto_completed(tmp_path: Path) -> None:
    module = _saved_model(model_dir(tmp_path, "written", SAVEDMODEL_CONFIG) / "model.savedmodel")
    _saved_model(model_dir(tmp_path, "auto", None) / "model.savedmodel")
    inputs = _inputs(3, 0)
    with serving(tmp_path) as engine:
        config = engine.model_config("auto")
        assert config["platform"] == "tensorflow_savedmodel" and config["backend"] == "tensorflow"
        assert config["max_batch_size"] == 4 and "dynamic_batching" in config
        assert {i["name"]: (i["data_type"], i["dims"]) for i in config["input"]} == {
            "x": ("TYPE_FP32", [4]),
            "s": ("TYPE_STRING", [1]),
        }
        assert {o["name"]: o["data_type"] for o in config["output"]} == {
            "scores": "TYPE_FP32",
            "length": "TYPE_INT32",
            "batch": "TYPE_INT32",
        }
        expected = _direct(module, inputs)
        written = infer(engine, "written", {"x": inputs["x"], "s": inputs["s"].reshape(3, 1)})
        np.testing.assert_allclose(written["scores"], expected["scores"], rtol=1e-6)
        np.testing.assert_array_equal(written["length"].reshape(3), expected["length"])
        # The auto-completed one was saved again with the same seeded weights.
        auto = infer(engine, "auto", {"x": inputs["x"], "s": inputs["s"].reshape(3, 1)})
        np.testing.assert_allclose(auto["scores"], expected["scores"], rtol=1e-6)
        np.testing.assert_array_equal(auto["length"].reshape(3), expected["length"])

        batches = [_inputs(rows, seed) for seed, rows in enumerate((2, 1, 3))]
        for inputs, result in zip(batches, execute_together(engine, "auto", batches), strict=True):
            outputs = outputs_of(result)
            np.testing.assert_allclose(outputs["scores"], _direct(module, inputs)["scores"], rtol=1e-6)
            np.testing.assert_array_equal(outputs["length"], _direct(module, inputs)["length"])
            np.testing.assert_array_equal(outputs["batch"], [[6]] * len(inputs["x"]))


def test_graphdef_written_and_auto_completed(tmp_path: Path) -> None:
    module = Scorer()
    written = SAVEDMODEL_CONFIG.replace("tensorflow_savedmodel", "tensorflow_graphdef")
    names = {"scores": "Identity_2", "length": "Identity_1", "batch": "Identity"}
    for output, node in names.items():
        written = written.replace(f'name: "{output}"', f'name: "{node}"')
    _frozen_graph(module, model_dir(tmp_path, "written", written) / "model.graphdef")
    _frozen_graph(module, model_dir(tmp_path, "auto", None) / "model.graphdef")
    inputs = _inputs(2, 5)
    expected = _direct(module, inputs)
    with serving(tmp_path) as engine:
        config = engine.model_config("auto")
        assert config["platform"] == "tensorflow_graphdef" and config["max_batch_size"] == 4
        assert sorted(i["name"] for i in config["input"]) == ["s", "x"]
        auto_outputs = {o["name"]: o for o in config["output"]}
        assert sorted(auto_outputs) == ["Identity", "Identity_1", "Identity_2"]
        by_type = {o["data_type"]: name for name, o in auto_outputs.items() if o["dims"] == [3]}
        outputs = infer(engine, "auto", {"x": inputs["x"], "s": inputs["s"].reshape(2, 1)})
        np.testing.assert_allclose(outputs[by_type["TYPE_FP32"]], expected["scores"], rtol=1e-6)
        served = infer(engine, "written", {"x": inputs["x"], "s": inputs["s"].reshape(2, 1)})
        values = {name: served[node] for name, node in names.items()}
        np.testing.assert_allclose(values["scores"], expected["scores"], rtol=1e-6)
        np.testing.assert_array_equal(values["length"].reshape(2), expected["length"])
        results = execute_together(
            engine, "written", [{"x": inputs["x"], "s": inputs["s"].reshape(2, 1)}] * 2
        )
        np.testing.assert_array_equal(outputs_of(results[0])["Identity"], [[4], [4]])


def test_bad_configs_are_refused(tmp_path: Path) -> None:
    _saved_model(
        model_dir(
            tmp_path, "wrong_type", SAVEDMODEL_CONFIG.replace("TYPE_FP32 dims: [4]", "TYPE_INT32 dims: [4]")
        )
        / "model.savedmodel"
    )
    _saved_model(
        model_dir(
            tmp_path,
            "no_signature",
            SAVEDMODEL_CONFIG + 'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "predict" } }',
        )
        / "model.savedmodel"
    )
    model_dir(tmp_path, "no_file", SAVEDMODEL_CONFIG)
    with serving(tmp_path) as engine:
        assert "input 'x' has data type TYPE_INT32 in the configuration but TYPE_FP32" in failure(
            engine, "wrong_type"
        )
        assert "has no signature 'predict' (it has ['serving_default'])" in failure(engine, "no_signature")
        assert "model file not found: " in failure(
            engine, "no_file"
        ) and "no_file/1/model.savedmodel'" in failure(engine, "no_file")
