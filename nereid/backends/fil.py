"""Tree models (`backend: "fil"`, configured as Triton's FIL backend): XGBoost, LightGBM, and Treelite
checkpoints (scikit-learn forests converted with `treelite.sklearn`), on the CPU through each library's own
predictor (Treelite's GTIL for checkpoints).

Parameters: `model_type` (xgboost, xgboost_json, xgboost_ubj, lightgbm, treelite_checkpoint),
`output_class` (classifier or regressor), `predict_proba` (class probabilities rather than the class) and
`threshold` (of a binary classifier). One input of FP32 features, [num_features] per row; one output,
[1] (the value or class) or [num_classes] (probabilities)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, ModelConfigError, Unavailable

# model_type -> Triton's default file name in the version folder
MODEL_FILES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}

Predict = Callable[[np.ndarray], np.ndarray]  # features (rows, num_features) -> (rows, outputs)


class FilBackend:
    name = "fil"
    # The file depends on `model_type`: chosen by `model_path` from the version folder.
    default_model_filename = ""
    requires_io = True

    def gpu_available(self) -> bool:
        return False  # trees run on the CPU: KIND_AUTO picks KIND_CPU, and KIND_GPU is refused

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        forest = _Forest(config, model_file)
        framework.complete_io(config, forest.inputs(), forest.outputs(), default_max_batch_size)

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        forest = _Forest(config, model_file)
        if len(config.input) != 1 or len(config.output) != 1:
            raise ModelConfigError(
                f"model '{config.name}': a FIL model has one input (the features) and one output, "
                f"the configuration lists {len(config.input)} and {len(config.output)}"
            )
        framework.check_io(config, "input", config.input, forest.inputs(config.input[0].name), True)
        framework.check_io(config, "output", config.output, forest.outputs(config.output[0].name), True)

    def create_instance(self, spec: InstanceSpec) -> FilInstance:
        if spec.kind == "GPU":
            raise framework.no_gpu(spec, "the FIL backend", "it runs tree models as KIND_CPU")
        return FilInstance(spec)


class FilInstance:
    def __init__(self, spec: InstanceSpec) -> None:
        self._forest = _Forest(spec.config, spec.model_file)
        self._input = spec.config.input[0].name
        self._output = spec.config.output[0].name
        self._model_name = spec.model_name

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        features = request.inputs[self._input]
        try:
            result = self._forest.predict(features)
        except Exception as exc:  # the libraries raise their own error types
            raise InternalError(f"error while running tree model '{self._model_name}': {exc}") from None
        return {self._output: result}

    def close(self) -> None:
        del self._forest


def create_backend() -> FilBackend:
    return FilBackend()


def model_path(config: mc.ModelConfig, model_file: Path) -> Path:
    if config.default_model_filename:
        return model_file
    return model_file / MODEL_FILES[_model_type(config)]


def _model_type(config: mc.ModelConfig) -> str:
    model_type = framework.parameters(config).get("model_type", "xgboost")
    if model_type not in MODEL_FILES:
        raise ModelConfigError(
            f"model '{config.name}': unknown model_type '{model_type}' (expected one of {sorted(MODEL_FILES)})"
        )
    return model_type


class _Forest:
    """A loaded model with Triton FIL's output rules."""

    def __init__(self, config: mc.ModelConfig, model_file: Path) -> None:
        if "output_class" not in config.parameters:
            raise ModelConfigError(
                f"model '{config.name}': the FIL backend needs the parameter 'output_class' "
                "(true for classifiers, false for regressors)"
            )
        self.output_class = framework.bool_parameter(config, "output_class", False)
        self.predict_proba = framework.bool_parameter(config, "predict_proba", False)
        self.threshold = framework.float_parameter(config, "threshold", 0.5)
        if self.predict_proba and not self.output_class:
            raise ModelConfigError(f"model '{config.name}': predict_proba needs output_class true")
        path = model_path(config, model_file)
        if not path.exists():
            raise framework.model_file_missing(path)
        model_type = _model_type(config)
        try:
            self._predict, self.num_features = _LOADERS[model_type](path)
            # One row tells how many values each row predicts (1, or one per class or target).
            self.num_outputs = self._raw(np.zeros((1, self.num_features), np.float32)).shape[1]
        except ImportError as exc:
            raise Unavailable(
                f"model '{config.name}': model_type '{model_type}' needs a package that is not installed "
                f"({exc.name}): pip install 'nereid[trees]'"
            ) from None
        except Exception as exc:
            raise Unavailable(f"failed to load '{path}' as {model_type}: {exc}") from None

    def inputs(self, name: str = "input__0") -> list[ModelTensor]:
        return [ModelTensor(name, mc.TYPE_FP32, (-1, self.num_features))]

    def outputs(self, name: str = "output__0") -> list[ModelTensor]:
        if self.predict_proba:
            width = 2 if self.num_outputs == 1 else self.num_outputs
        elif self.output_class:
            width = 1
        else:
            width = self.num_outputs
        return [ModelTensor(name, mc.TYPE_FP32, (-1, width))]

    def _raw(self, features: np.ndarray) -> np.ndarray:
        result = np.asarray(self._predict(features))
        return result.reshape(features.shape[0], -1)

    def predict(self, features: np.ndarray) -> np.ndarray:
        raw = self._raw(features).astype(np.float32, copy=False)
        if not self.output_class:
            return raw
        if raw.shape[1] == 1:  # binary: the probability of class 1
            if self.predict_proba:
                return np.concatenate([1.0 - raw, raw], axis=1)
            return (raw > self.threshold).astype(np.float32)
        if self.predict_proba:
            return raw
        return raw.argmax(axis=1).astype(np.float32).reshape(-1, 1)


def _xgboost(path: Path) -> tuple[Predict, int]:
    xgboost: Any = importlib.import_module("xgboost")
    with warnings.catch_warnings():  # Triton's `xgboost.model` name tells XGBoost no format: it guesses
        warnings.simplefilter("ignore", UserWarning)
        booster = xgboost.Booster(model_file=str(path))

    def predict(features: np.ndarray) -> np.ndarray:
        return booster.inplace_predict(features, validate_features=False)  # type: ignore[no-any-return]

    return predict, int(booster.num_features())


def _lightgbm(path: Path) -> tuple[Predict, int]:
    lightgbm: Any = importlib.import_module("lightgbm")
    booster = lightgbm.Booster(model_file=str(path))

    def predict(features: np.ndarray) -> np.ndarray:
        return booster.predict(features)  # type: ignore[no-any-return]

    return predict, int(booster.num_feature())


def _treelite(path: Path) -> tuple[Predict, int]:
    treelite: Any = importlib.import_module("treelite")
    model = treelite.Model.deserialize(str(path))

    def predict(features: np.ndarray) -> np.ndarray:
        return treelite.gtil.predict(model, features)  # type: ignore[no-any-return]

    return predict, int(model.num_feature)


_LOADERS: dict[str, Callable[[Path], tuple[Predict, int]]] = {
    "xgboost": _xgboost,
    "xgboost_json": _xgboost,
    "xgboost_ubj": _xgboost,
    "lightgbm": _lightgbm,
    "treelite_checkpoint": _treelite,
}
