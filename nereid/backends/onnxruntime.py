"""ONNX Runtime backend (`platform: "onnxruntime_onnx"` / `backend: "onnxruntime"`): a session per instance."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, InvalidArgument, Unavailable

log = logging.getLogger(__name__)

# ONNX type strings -> config data types
_ONNX_TYPES = {
    "tensor(bool)": mc.TYPE_BOOL,
    "tensor(uint8)": mc.TYPE_UINT8,
    "tensor(uint16)": mc.TYPE_UINT16,
    "tensor(uint32)": mc.TYPE_UINT32,
    "tensor(uint64)": mc.TYPE_UINT64,
    "tensor(int8)": mc.TYPE_INT8,
    "tensor(int16)": mc.TYPE_INT16,
    "tensor(int32)": mc.TYPE_INT32,
    "tensor(int64)": mc.TYPE_INT64,
    "tensor(float16)": mc.TYPE_FP16,
    "tensor(float)": mc.TYPE_FP32,
    "tensor(double)": mc.TYPE_FP64,
    "tensor(bfloat16)": mc.TYPE_BF16,
    "tensor(string)": mc.TYPE_STRING,
}

# Session options Triton's ONNX Runtime backend reads from config `parameters`.
_THREAD_PARAMETERS = {
    "intra_op_thread_count": "intra_op_num_threads",
    "inter_op_thread_count": "inter_op_num_threads",
}


class OnnxRuntimeBackend:
    name = "onnxruntime"
    default_model_filename = "model.onnx"
    requires_io = True

    def gpu_available(self) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        session = _metadata_session(model_file)
        framework.complete_io(
            config,
            _model_tensors(session.get_inputs()),
            _model_tensors(session.get_outputs()),
            default_max_batch_size,
        )

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        session = _metadata_session(model_file)
        framework.check_io(
            config, "input", config.input, _model_tensors(session.get_inputs()), require_all=True
        )
        framework.check_io(
            config, "output", config.output, _model_tensors(session.get_outputs()), require_all=False
        )

    def create_instance(self, spec: InstanceSpec) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(spec, self.gpu_available())


class OnnxRuntimeInstance:
    def __init__(self, spec: InstanceSpec, gpu_available: bool) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # ORT's intra-op threads spin between runs by default, burning the CPU that other instances and
        # the HTTP loop need; servers run many short inferences, so they wait instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        for key, option in _THREAD_PARAMETERS.items():
            count = framework.int_parameter(spec.config, key, 0)  # 0: ONNX Runtime's own default
            if count:
                setattr(options, option, count)
        level = spec.config.optimization.graph.level
        if level == -1:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        elif level == 1:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if spec.kind == "GPU":
            if not gpu_available:
                raise framework.no_gpu(spec, "ONNX Runtime", "install onnxruntime-gpu on a GPU host")
            providers: list = [
                ("CUDAExecutionProvider", {"device_id": spec.device_id}),
                "CPUExecutionProvider",
            ]
        else:
            providers = ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(str(spec.model_file), options, providers=providers)
        except Exception as exc:  # ORT raises its own exception types; report the reason whole
            raise Unavailable(f"failed to load model '{spec.model_name}': {exc}") from None
        # InferenceSession.run wraps the binding's run in four Python-level checks per call, all of which
        # the request checks have made already; on microsecond models they cost as much as the model.
        # Both take (output names, feed, run options).
        binding: Any = getattr(self._session, "_sess", None)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self._session.run
        self._string_inputs = {i.name for i in self._session.get_inputs() if i.type == "tensor(string)"}
        self._string_outputs = {o.name for o in self._session.get_outputs() if o.type == "tensor(string)"}
        self._model_name = spec.model_name

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        inputs, outputs = request.inputs, request.outputs
        feed = inputs
        if self._string_inputs:
            feed = {
                name: _to_ort_strings(name, a) if name in self._string_inputs else a
                for name, a in inputs.items()
            }
        try:
            results = self._run(outputs if isinstance(outputs, list) else list(outputs), feed, None)
        except Exception as exc:  # ORT's RuntimeException & co carry the useful text
            raise InternalError(
                f"onnx runtime error while running model '{self._model_name}': {exc}"
            ) from None
        out: Outputs = dict(zip(outputs, results, strict=True))
        for name in self._string_outputs.intersection(out):
            out[name] = _from_ort_strings(out[name])
        return out

    def close(self) -> None:
        del self._session


def create_backend() -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend()


def _metadata_session(model_file: Path) -> ort.InferenceSession:
    if not model_file.exists():
        raise framework.model_file_missing(model_file)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise Unavailable(f"failed to load '{model_file}': {exc}") from None


def _model_tensors(tensors: Sequence[ort.NodeArg]) -> list[ModelTensor]:
    """ONNX Runtime names variable dimensions (strings) or leaves them out (None): both become -1."""
    return [
        ModelTensor(
            t.name,
            _ONNX_TYPES.get(t.type, mc.TYPE_INVALID),
            tuple(d if isinstance(d, int) and d >= 0 else -1 for d in t.shape),
            type_name=t.type,
        )
        for t in tensors
    ]


def _to_ort_strings(name: str, array: np.ndarray) -> np.ndarray:
    """ONNX Runtime wants str elements; BYTES tensors carry bytes."""
    try:
        return np.vectorize(lambda b: b.decode("utf-8") if isinstance(b, bytes) else str(b), otypes=[object])(
            array
        )
    except UnicodeDecodeError:
        raise InvalidArgument(f"input '{name}': ONNX Runtime string tensors must hold UTF-8 text") from None


def _from_ort_strings(array: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda s: s.encode("utf-8") if isinstance(s, str) else bytes(s), otypes=[object])(
        array
    )
