"""TensorRT backend (`platform: "tensorrt_plan"`): serialized engines (`model.plan`) through the `tensorrt`
Python package (TensorRT 10 tensor API), with torch CUDA tensors as device buffers; an execution context
and a CUDA stream per instance. TensorRT needs a CUDA GPU: elsewhere the model fails to load, saying so."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorrt as trt
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, Unavailable

_LOGGER = trt.Logger(trt.Logger.WARNING)
_TRT_TYPES = {
    "BOOL": mc.TYPE_BOOL,
    "UINT8": mc.TYPE_UINT8,
    "INT8": mc.TYPE_INT8,
    "INT32": mc.TYPE_INT32,
    "INT64": mc.TYPE_INT64,
    "HALF": mc.TYPE_FP16,
    "FLOAT": mc.TYPE_FP32,
    "BF16": mc.TYPE_BF16,
}
_lock = threading.Lock()


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise Unavailable(
            "the TensorRT backend keeps tensors in CUDA memory through torch: pip install 'nereid[tensorrt]'"
        ) from None
    return torch


def _cuda_available() -> bool:
    try:
        return bool(_torch().cuda.is_available())
    except Unavailable:
        return False


class TensorRtBackend:
    name = "tensorrt"
    default_model_filename = "model.plan"
    requires_io = True

    def gpu_available(self) -> bool:
        return _cuda_available()

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        inputs, outputs = _tensors(_engine(config, model_file, 0))
        framework.complete_io(config, inputs, outputs, default_max_batch_size)

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        inputs, outputs = _tensors(_engine(config, model_file, 0))
        framework.check_io(config, "input", config.input, inputs, require_all=True)
        framework.check_io(config, "output", config.output, outputs, require_all=False)

    def create_instance(self, spec: InstanceSpec) -> TensorRtInstance:
        if spec.kind != "GPU":
            raise Unavailable(
                f"instance '{spec.instance_name}' of model '{spec.model_name}': TensorRT plans run on GPUs "
                "only (KIND_GPU)"
            )
        return TensorRtInstance(spec)


class TensorRtInstance:
    def __init__(self, spec: InstanceSpec) -> None:
        torch = _torch()
        self._torch = torch
        self._model_name = spec.model_name
        self._device = torch.device("cuda", spec.device_id)
        self._engine = _engine(spec.config, spec.model_file, spec.device_id)
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream(device=self._device)
        self._inputs, self._outputs = ([t.name for t in tensors] for tensors in _tensors(self._engine))
        self._output_types = {
            name: _torch_type(torch, self._engine.get_tensor_dtype(name)) for name in self._outputs
        }

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        torch = self._torch
        with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
            keep = []
            for name in self._inputs:
                tensor = torch.from_numpy(np.ascontiguousarray(request.inputs[name])).to(self._device)
                keep.append(tensor)
                self._context.set_input_shape(name, tuple(tensor.shape))
                self._context.set_tensor_address(name, tensor.data_ptr())
            results = {}
            for name in self._outputs:
                shape = tuple(self._context.get_tensor_shape(name))
                buffer = torch.empty(shape, dtype=self._output_types[name], device=self._device)
                results[name] = buffer
                self._context.set_tensor_address(name, buffer.data_ptr())
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise InternalError(f"TensorRT failed to run model '{self._model_name}'")
            self._stream.synchronize()
        return {name: results[name].cpu().numpy() for name in request.outputs}

    def close(self) -> None:
        del self._context, self._engine


def create_backend() -> TensorRtBackend:
    return TensorRtBackend()


def _engine(config: mc.ModelConfig, model_file: Path, device_id: int) -> Any:
    if not model_file.exists():
        raise framework.model_file_missing(model_file)
    if not _cuda_available():
        raise Unavailable(
            f"model '{config.name}': TensorRT plans need a CUDA GPU, and this host has none "
            "(or torch was built without CUDA)"
        )
    with _lock, _torch().cuda.device(device_id):
        engine = trt.Runtime(_LOGGER).deserialize_cuda_engine(model_file.read_bytes())
    if engine is None:
        raise Unavailable(
            f"failed to load '{model_file}': TensorRT could not deserialize it (a plan must be built by "
            "the same TensorRT version for the same GPU)"
        )
    return engine


def _tensors(engine: Any) -> tuple[list[ModelTensor], list[ModelTensor]]:
    inputs: list[ModelTensor] = []
    outputs: list[ModelTensor] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        data_type = _TRT_TYPES.get(engine.get_tensor_dtype(name).name, mc.TYPE_INVALID)
        tensor = ModelTensor(name, data_type, shape)
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(tensor)
    return inputs, outputs


def _torch_type(torch: Any, data_type: Any) -> Any:
    return {
        "BOOL": torch.bool,
        "UINT8": torch.uint8,
        "INT8": torch.int8,
        "INT32": torch.int32,
        "INT64": torch.int64,
        "HALF": torch.float16,
        "FLOAT": torch.float32,
        "BF16": torch.bfloat16,
    }[data_type.name]
