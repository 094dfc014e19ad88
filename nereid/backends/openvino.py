"""OpenVINO backend (`backend: "openvino"`): OpenVINO IR (`model.xml` beside its `model.bin`) or any
format OpenVINO reads (`default_model_filename: "model.onnx"`), compiled once per instance.

Parameters as Triton's OpenVINO backend reads them: INFERENCE_NUM_THREADS, NUM_STREAMS,
PERFORMANCE_HINT and the like are passed to the compiled model; SKIP_OV_DYNAMIC_BATCHSIZE keeps a
static first dimension (otherwise a batching model's first dimension is made dynamic);
ENABLE_BATCH_PADDING serves a model whose batch dimension is fixed: smaller batches are padded with
zeros up to it, and the padding is cut from the outputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, ModelConfigError, Unavailable

# Config parameters handed to compile_model as OpenVINO properties.
_PROPERTIES = (
    "INFERENCE_NUM_THREADS",
    "NUM_STREAMS",
    "PERFORMANCE_HINT",
    "PERFORMANCE_HINT_NUM_REQUESTS",
    "INFERENCE_PRECISION_HINT",
    "ENABLE_CPU_PINNING",
    "ENABLE_HYPER_THREADING",
    "SCHEDULING_CORE_TYPE",
)

_OV_TYPES = {
    "boolean": mc.TYPE_BOOL,
    "u8": mc.TYPE_UINT8,
    "u16": mc.TYPE_UINT16,
    "u32": mc.TYPE_UINT32,
    "u64": mc.TYPE_UINT64,
    "i8": mc.TYPE_INT8,
    "i16": mc.TYPE_INT16,
    "i32": mc.TYPE_INT32,
    "i64": mc.TYPE_INT64,
    "f16": mc.TYPE_FP16,
    "f32": mc.TYPE_FP32,
    "f64": mc.TYPE_FP64,
    "bf16": mc.TYPE_BF16,
}

_core: ov.Core | None = None


def _the_core() -> ov.Core:
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


class OpenVinoBackend:
    name = "openvino"
    default_model_filename = "model.xml"
    requires_io = True

    def gpu_available(self) -> bool:
        # KIND_GPU means a CUDA device in Triton; OpenVINO drives none, so its instances run on the CPU
        # (KIND_AUTO picks KIND_CPU) and KIND_GPU is refused.
        return False

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        model = _read(model_file)
        framework.complete_io(config, _tensors(model.inputs), _tensors(model.outputs), default_max_batch_size)

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        model = _prepare(config, _read(model_file))
        # As Triton's OpenVINO backend checks them: for a batching model the first dimension is the batch,
        # even where the graph fixes it (a model with a fixed batch serves that batch, or smaller ones with
        # ENABLE_BATCH_PADDING).
        batching = config.max_batch_size > 0
        inputs, outputs = _tensors(model.inputs, batching), _tensors(model.outputs, batching)
        framework.check_io(config, "input", config.input, inputs, require_all=True)
        framework.check_io(config, "output", config.output, outputs, require_all=False)

    def create_instance(self, spec: InstanceSpec) -> OpenVinoInstance:
        if spec.kind == "GPU":
            raise framework.no_gpu(spec, "OpenVINO", "OpenVINO instances run as KIND_CPU")
        return OpenVinoInstance(spec)


class OpenVinoInstance:
    def __init__(self, spec: InstanceSpec) -> None:
        config = spec.config
        self._model_name = spec.model_name
        model = _prepare(config, _read(spec.model_file))
        settings = framework.parameters(config)
        properties = {key: settings[key] for key in _PROPERTIES if key in settings}
        try:
            self._compiled = _the_core().compile_model(model, "CPU", properties)
        except Exception as exc:  # OpenVINO raises RuntimeError with the reason
            raise Unavailable(f"failed to load model '{spec.model_name}': {exc}") from None
        self._request = self._compiled.create_infer_request()
        self._ports = {o.name: self._compiled.output(o.name) for o in config.output}
        # With batch padding, each input's fixed batch size, which smaller batches are padded up to.
        self._pad_to: dict[str, int] = {}
        if _batch_padding(config):
            for port in model.inputs:
                shape = port.get_partial_shape()
                if shape.rank.is_static and len(shape) > 0 and shape[0].is_static:
                    self._pad_to[port.get_any_name()] = shape[0].get_length()

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        inputs = {n: np.ascontiguousarray(a) for n, a in request.inputs.items()}
        batch = None
        if self._pad_to:
            batch = next(iter(inputs.values())).shape[0]
            inputs = {n: self._padded(n, a) for n, a in inputs.items()}
        try:
            # The inputs are not written to, so OpenVINO may read them in place.
            results = self._request.infer(inputs, share_inputs=True)
        except Exception as exc:
            raise InternalError(f"OpenVINO error while running model '{self._model_name}': {exc}") from None
        outputs = {name: results[self._ports[name]] for name in request.outputs}
        if batch is not None:
            outputs = {name: array[:batch] for name, array in outputs.items()}
        return outputs

    def _padded(self, name: str, array: np.ndarray) -> np.ndarray:
        size = self._pad_to.get(name)
        if size is None or array.shape[0] == size:
            return array
        if array.shape[0] > size:
            raise InternalError(
                f"model '{self._model_name}': batch of {array.shape[0]} for input '{name}' is larger than "
                f"the model's fixed batch size {size}"
            )
        padding = np.zeros((size - array.shape[0], *array.shape[1:]), dtype=array.dtype)
        return np.concatenate([array, padding])

    def close(self) -> None:
        del self._request, self._compiled


def create_backend() -> OpenVinoBackend:
    return OpenVinoBackend()


def _read(model_file: Path) -> Any:
    if not model_file.exists():
        raise framework.model_file_missing(model_file)
    try:
        return _the_core().read_model(str(model_file))
    except Exception as exc:
        raise Unavailable(f"failed to load '{model_file}': {exc}") from None


def _batch_padding(config: mc.ModelConfig) -> bool:
    return config.max_batch_size > 0 and framework.bool_parameter(config, "ENABLE_BATCH_PADDING", False)


def _prepare(config: mc.ModelConfig, model: Any) -> Any:
    """Make the first dimension dynamic for a batching model, unless told to keep it (or to pad to it)."""
    if (
        config.max_batch_size <= 0
        or framework.bool_parameter(config, "SKIP_OV_DYNAMIC_BATCHSIZE", False)
        or _batch_padding(config)
    ):
        return model
    shapes = {}
    for port in model.inputs:
        shape = port.get_partial_shape()
        if shape.rank.is_static and len(shape) > 0 and shape[0].is_static:
            shape[0] = ov.Dimension(-1)
            shapes[port] = shape
    if shapes:
        try:
            model.reshape(shapes)
        except Exception as exc:
            raise ModelConfigError(
                f"model '{config.name}': cannot make the first dimension of the model's inputs dynamic "
                f"for max_batch_size {config.max_batch_size}: {exc}"
            ) from None
    return model


def _tensors(ports: Any, batch_first: bool = False) -> list[ModelTensor]:
    """The model's tensors as configs see them; `batch_first`: a fixed first dimension is the batch."""
    tensors = []
    for port in ports:
        shape = port.get_partial_shape()
        dims = None if shape.rank.is_dynamic else tuple(d.get_length() if d.is_static else -1 for d in shape)
        if batch_first and dims:
            dims = (-1, *dims[1:])
        data_type = _OV_TYPES.get(port.get_element_type().get_type_name(), mc.TYPE_INVALID)
        tensors.append(ModelTensor(port.get_any_name(), data_type, dims))
    return tensors
