"""Tree models trained here (XGBoost, LightGBM, scikit-learn through Treelite), served as Triton's FIL
backend serves them, and compared with each library's own predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.backends.serving import execute_together, failure, infer, model_dir, outputs_of, serving

xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")
treelite = pytest.importorskip("treelite")
ensemble = pytest.importorskip("sklearn.ensemble")

RNG = np.random.default_rng(0)
X = RNG.random((300, 6)).astype(np.float32)
BINARY = (X[:, 0] + X[:, 1] > 1.0).astype(np.int32)
CLASSES = np.minimum((X[:, 2] * 3).astype(np.int32), 2)
TARGET = X[:, 3] * 2 + X[:, 4]
TEST = RNG.random((4, 6)).astype(np.float32)


def _config(model_type: str, output_class: bool, predict_proba: bool = False, extra: str = "") -> str:
    def parameter(key: str, value: str) -> str:
        return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'

    return (
        'backend: "fil"\n'
        + parameter("model_type", model_type)
        + parameter("output_class", str(output_class).lower())
        + parameter("predict_proba", str(predict_proba).lower())
        + extra
    )


def _written(width: int) -> str:
    return f"""max_batch_size: 16
input [{{ name: "input__0" data_type: TYPE_FP32 dims: [6] }}]
output [{{ name: "output__0" data_type: TYPE_FP32 dims: [{width}] }}]
dynamic_batching {{}}
"""


def test_xgboost_binary_and_multiclass(tmp_path: Path) -> None:
    binary = xgboost.train({"objective": "binary:logistic", "max_depth": 3}, xgboost.DMatrix(X, BINARY), 8)
    binary.save_model(
        str(model_dir(tmp_path, "binary", _config("xgboost", True, extra=_written(1))) / "xgboost.model")
    )
    threshold = 'parameters { key: "threshold" value: { string_value: "0.7" } }\n'
    binary.save_model(
        str(model_dir(tmp_path, "strict", _config("xgboost", True, extra=threshold)) / "xgboost.model")
    )
    multi = xgboost.train(
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 3}, xgboost.DMatrix(X, CLASSES), 8
    )
    multi.save_model(str(model_dir(tmp_path, "proba", _config("xgboost_json", True, True)) / "xgboost.json"))
    multi.save_model(str(model_dir(tmp_path, "label", _config("xgboost_json", True)) / "xgboost.json"))
    p = binary.predict(xgboost.DMatrix(TEST))
    probabilities = multi.predict(xgboost.DMatrix(TEST))
    with serving(tmp_path) as engine:
        np.testing.assert_array_equal(
            infer(engine, "binary", {"input__0": TEST})["output__0"], (p > 0.5)[:, None]
        )
        np.testing.assert_array_equal(
            infer(engine, "strict", {"input__0": TEST})["output__0"], (p > 0.7)[:, None]
        )
        config = engine.model_config("proba")
        assert config["max_batch_size"] == 4 and "dynamic_batching" in config
        assert config["input"][0]["name"] == "input__0" and config["input"][0]["dims"] == [6]
        assert config["output"][0]["name"] == "output__0" and config["output"][0]["dims"] == [3]
        np.testing.assert_allclose(
            infer(engine, "proba", {"input__0": TEST})["output__0"], probabilities, rtol=1e-6
        )
        labels = infer(engine, "label", {"input__0": TEST})["output__0"]
        np.testing.assert_array_equal(labels, probabilities.argmax(axis=1)[:, None])
        batches = [{"input__0": TEST[:2]}, {"input__0": TEST[2:]}]
        results = execute_together(engine, "proba", batches)
        np.testing.assert_allclose(outputs_of(results[0])["output__0"], probabilities[:2], rtol=1e-6)
        np.testing.assert_allclose(outputs_of(results[1])["output__0"], probabilities[2:], rtol=1e-6)


def test_lightgbm_regressor_and_binary_probabilities(tmp_path: Path) -> None:
    regressor = lightgbm.train({"objective": "regression", "verbose": -1}, lightgbm.Dataset(X, TARGET), 10)
    regressor.save_model(
        str(model_dir(tmp_path, "regressor", _config("lightgbm", False, extra=_written(1))) / "model.txt")
    )
    classifier = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(X, BINARY), 10)
    classifier.save_model(
        str(model_dir(tmp_path, "classifier", _config("lightgbm", True, True)) / "model.txt")
    )
    with serving(tmp_path) as engine:
        values = infer(engine, "regressor", {"input__0": TEST})["output__0"]
        np.testing.assert_allclose(values[:, 0], regressor.predict(TEST), rtol=1e-5)
        p = classifier.predict(TEST)
        assert engine.model_config("classifier")["output"][0]["dims"] == [2]
        probabilities = infer(engine, "classifier", {"input__0": TEST})["output__0"]
        np.testing.assert_allclose(probabilities, np.stack([1 - p, p], axis=1), rtol=1e-5, atol=1e-7)
        results = execute_together(engine, "regressor", [{"input__0": TEST[i : i + 1]} for i in range(4)])
        for i, result in enumerate(results):
            np.testing.assert_allclose(
                outputs_of(result)["output__0"][0, 0], regressor.predict(TEST[i : i + 1])[0], rtol=1e-5
            )


def test_sklearn_forest_through_a_treelite_checkpoint(tmp_path: Path) -> None:
    forest = ensemble.RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0).fit(X, CLASSES)
    checkpoint = treelite.sklearn.import_model(forest)
    for name, proba in (("forest_proba", True), ("forest", False)):
        checkpoint.serialize(
            str(model_dir(tmp_path, name, _config("treelite_checkpoint", True, proba)) / "checkpoint.tl")
        )
    with serving(tmp_path) as engine:
        expected = forest.predict_proba(TEST)
        np.testing.assert_allclose(
            infer(engine, "forest_proba", {"input__0": TEST})["output__0"], expected, rtol=1e-5
        )
        labels = infer(engine, "forest", {"input__0": TEST})["output__0"]
        np.testing.assert_array_equal(labels[:, 0], forest.predict(TEST))


def test_bad_configs_are_refused(tmp_path: Path) -> None:
    booster = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(X, BINARY), 2)
    booster.save_model(str(model_dir(tmp_path, "no_output_class", 'backend: "fil"') / "xgboost.model"))
    booster.save_model(str(model_dir(tmp_path, "unknown_type", _config("catboost", True)) / "xgboost.model"))
    wrong = _config("xgboost", True, extra=_written(1).replace("dims: [6]", "dims: [7]"))
    booster.save_model(str(model_dir(tmp_path, "wrong_features", wrong) / "xgboost.model"))
    model_dir(tmp_path, "no_file", _config("lightgbm", False))
    with serving(tmp_path) as engine:
        assert "needs the parameter 'output_class'" in failure(engine, "no_output_class")
        assert "unknown model_type 'catboost'" in failure(engine, "unknown_type")
        assert "input 'input__0' has dims [7] in the configuration" in failure(engine, "wrong_features")
        assert "model file not found: " in failure(engine, "no_file")
        assert "no_file/1/model.txt'" in failure(engine, "no_file")
