"""PyTorch backend (`platform: "pytorch_libtorch"` / `backend: "pytorch"`): TorchScript `model.pt` files,
and `torch.export` programs (`default_model_filename: "model.pt2"`), one module per instance.

Tensor names follow Triton's PyTorch backend: inputs are the forward function's argument names or
`<name>__<index>` (else they are taken in config order); outputs are `<name>__<index>`, an index into
the tuple the model returns (else config order)."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, ModelConfigError, Unavailable
from nereid.model_config.sequence import supplied_inputs

log = logging.getLogger(__name__)

# Request tensors may be read-only views of the received bytes; torch warns that it cannot protect
# them from writes. Models do not write their inputs, so they are passed without a copy.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
# Triton serves TorchScript files; torch's deprecation notice is no news to the server's users.
warnings.filterwarnings("ignore", message="`torch.jit.load` is deprecated", category=DeprecationWarning)

_TORCH_TYPES = {
    torch.bool: mc.TYPE_BOOL,
    torch.uint8: mc.TYPE_UINT8,
    torch.int8: mc.TYPE_INT8,
    torch.int16: mc.TYPE_INT16,
    torch.int32: mc.TYPE_INT32,
    torch.int64: mc.TYPE_INT64,
    torch.float16: mc.TYPE_FP16,
    torch.float32: mc.TYPE_FP32,
    torch.float64: mc.TYPE_FP64,
    torch.bfloat16: mc.TYPE_BF16,
}
_INDEXED = re.compile(r"^.+__(\d+)$")


class PyTorchBackend:
    name = "pytorch"
    default_model_filename = "model.pt"
    requires_io = True

    def gpu_available(self) -> bool:
        return torch.cuda.is_available()

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        # TorchScript carries no data types or shapes, so as in Triton its config must list the tensors;
        # an exported program describes them fully.
        if model_file.suffix != ".pt2":
            return
        inputs, outputs = _exported_signature(_load_exported(model_file))
        framework.complete_io(config, inputs, outputs, default_max_batch_size)

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        for tensor in [*config.input, *config.output]:
            if tensor.data_type not in _TORCH_TYPES.values() and tensor.data_type != mc.TYPE_STRING:
                raise ModelConfigError(
                    f"model '{config.name}': tensor '{tensor.name}' has data type "
                    f"{mc.DataType.Name(tensor.data_type)}, which the PyTorch backend does not support"
                )
        if model_file.suffix == ".pt2":
            inputs, outputs = _exported_signature(_load_exported(model_file))
            framework.check_io(config, "input", config.input, inputs, require_all=True)
            output_names = {o.name for o in outputs}
            if all(o.name in output_names for o in config.output):
                framework.check_io(config, "output", config.output, outputs, require_all=False)

    def create_instance(self, spec: InstanceSpec) -> PyTorchInstance:
        return PyTorchInstance(spec, self.gpu_available())


class PyTorchInstance:
    def __init__(self, spec: InstanceSpec, gpu_available: bool) -> None:
        config = spec.config
        self._model_name = spec.model_name
        if spec.kind == "GPU":
            if not gpu_available:
                raise framework.no_gpu(spec, "PyTorch", "install a CUDA build of torch on a GPU host")
            self._device = torch.device("cuda", spec.device_id)
        else:
            self._device = torch.device("cpu")
        self._intra_threads = _set_threads(config)
        self._inference_mode = framework.bool_parameter(config, "INFERENCE_MODE", True)
        self._optimized = not framework.bool_parameter(config, "DISABLE_OPTIMIZED_EXECUTION", False)
        exported = spec.model_file.suffix == ".pt2"
        try:
            if exported:
                program = _load_exported(spec.model_file)
                self._module: Any = program.module().to(self._device)
                argument_names = [t.name for t in _exported_signature(program)[0]]
            else:
                self._module = torch.jit.load(str(spec.model_file), map_location=self._device)
                argument_names = [a.name for a in self._module.forward.schema.arguments[1:]]
        except Unavailable:
            raise
        except Exception as exc:  # torch raises RuntimeError & co with the useful text
            raise Unavailable(f"failed to load model '{spec.model_name}': {exc}") from None
        if not exported:
            self._module.eval()
        self._input_order = _input_order(config, argument_names)
        self._output_index = _output_index(config)
        self._output_types = {o.name: framework.numpy_type(o.data_type) for o in config.output}
        # TorchScript takes and returns strings as List[str], as in Triton's PyTorch backend.
        self._string_inputs = {i.name for i in config.input if i.data_type == mc.TYPE_STRING}
        self._string_outputs = {o.name for o in config.output if o.data_type == mc.TYPE_STRING}

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        # torch's intra-op thread count belongs to the calling thread (OpenMP), and executions run on the
        # scheduler's threads: set it where the model runs.
        if self._intra_threads and torch.get_num_threads() != self._intra_threads:
            torch.set_num_threads(self._intra_threads)
        try:
            arguments = [
                _strings_in(request.inputs[name])
                if name in self._string_inputs
                else _to_torch(request.inputs[name], self._device)
                for name in self._input_order
            ]
        except KeyError as exc:  # an optional input left out: TorchScript has no defaults to use
            raise InternalError(
                f"model '{self._model_name}': input {exc} is required by the PyTorch model"
            ) from None
        mode = torch.inference_mode() if self._inference_mode else torch.no_grad()
        optimized = torch.jit.optimized_execution(False) if not self._optimized else contextlib.nullcontext()
        try:
            with mode, optimized:
                result = self._module(*arguments)
        except Exception as exc:
            raise InternalError(f"PyTorch error while running model '{self._model_name}': {exc}") from None
        # One List[str] output is a value of its own, not a list of outputs.
        strings = isinstance(result, list) and bool(result) and all(isinstance(v, str) for v in result)
        values = list(result) if isinstance(result, tuple | list) and not strings else [result]
        outputs: Outputs = {}
        for name in request.outputs:
            index = self._output_index[name]
            if name in self._string_outputs and index < len(values) and isinstance(values[index], list):
                outputs[name] = _strings_out(values[index])
                continue
            if index >= len(values) or not isinstance(values[index], torch.Tensor):
                raise InternalError(
                    f"model '{self._model_name}': output '{name}' is item {index} of what the model returns, "
                    f"but it returned {len(values)} value(s) of types {[type(v).__name__ for v in values]}"
                )
            array = _to_numpy(values[index])
            if array.dtype != self._output_types[name]:
                raise InternalError(
                    f"model '{self._model_name}': output '{name}' is {array.dtype} but the configuration "
                    f"says {self._output_types[name]}"
                )
            outputs[name] = array
        return outputs

    def close(self) -> None:
        del self._module


def create_backend() -> PyTorchBackend:
    return PyTorchBackend()


def _load_exported(model_file: Path) -> Any:
    if not model_file.exists():
        raise framework.model_file_missing(model_file)
    try:
        return torch.export.load(str(model_file))
    except Exception as exc:
        raise Unavailable(f"failed to load '{model_file}': {exc}") from None


def _exported_signature(program: Any) -> tuple[list[ModelTensor], list[ModelTensor]]:
    """Inputs by argument name, outputs as OUTPUT__<index>, with the traced data types and shapes
    (symbolic dimensions are variable)."""
    nodes = {n.name: n for n in program.graph.nodes}
    inputs = [
        _exported_tensor(spec.arg.name, nodes[spec.arg.name])
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    outputs = [
        _exported_tensor(f"OUTPUT__{index}", nodes[spec.arg.name])
        for index, spec in enumerate(
            s
            for s in program.graph_signature.output_specs
            if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
        )
    ]
    return inputs, outputs


def _exported_tensor(name: str, node: Any) -> ModelTensor:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return ModelTensor(name, mc.TYPE_INVALID, None)
    shape = tuple(d if isinstance(d, int) else -1 for d in value.shape)
    return ModelTensor(name, _TORCH_TYPES.get(value.dtype, mc.TYPE_INVALID), shape)


def _input_order(config: mc.ModelConfig, argument_names: list[str]) -> list[str]:
    """Config input names, and the sequence batcher's control and state inputs, in the order the forward
    function takes them."""
    names = [i.name for i in config.input] + sorted(supplied_inputs(config))
    if argument_names and set(names) == set(argument_names):
        return list(argument_names)
    indexed = [_INDEXED.match(n) for n in names]
    if names and all(indexed):
        by_index = {int(m.group(1)): n for m, n in zip(indexed, names, strict=True) if m}
        if sorted(by_index) == list(range(len(names))):
            return [by_index[i] for i in range(len(names))]
        raise ModelConfigError(
            f"model '{config.name}': inputs named <name>__<index> must number 0 to {len(names) - 1} "
            f"once each, got {names}"
        )
    if argument_names and len(argument_names) != len(names):
        raise ModelConfigError(
            f"model '{config.name}': the configuration lists inputs {names}, but the model's forward "
            f"function takes {argument_names}; name them as its arguments or <name>__<index>"
        )
    return names


def _output_index(config: mc.ModelConfig) -> dict[str, int]:
    names = [o.name for o in config.output]
    indexed = [_INDEXED.match(n) for n in names]
    if names and all(indexed):
        return {n: int(m.group(1)) for m, n in zip(indexed, names, strict=True) if m}
    return {n: i for i, n in enumerate(names)}


def _set_threads(config: mc.ModelConfig) -> int:
    """Triton's INTRA_OP_THREAD_COUNT (returned, for the executing threads) and INTER_OP_THREAD_COUNT
    (process-wide in torch, as in Triton)."""
    intra = framework.int_parameter(config, "INTRA_OP_THREAD_COUNT", 0)
    inter = framework.int_parameter(config, "INTER_OP_THREAD_COUNT", 0)
    if inter > 0 and torch.get_num_interop_threads() != inter:
        try:
            torch.set_num_interop_threads(inter)
        except RuntimeError:  # torch fixes it once inter-op work has started
            log.warning(
                "model '%s': INTER_OP_THREAD_COUNT=%d ignored: torch already runs %d inter-op threads",
                config.name,
                inter,
                torch.get_num_interop_threads(),
            )
    return max(intra, 0)


def _strings_in(array: np.ndarray) -> list[str]:
    """A BYTES tensor as the List[str] a TorchScript model takes (its elements in order)."""
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]


def _strings_out(values: list[Any]) -> np.ndarray:
    """A List[str] the model returned, as a 1-D BYTES tensor."""
    return np.array([v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values], dtype=np.object_)


def _to_torch(array: np.ndarray, device: torch.device) -> torch.Tensor:
    if array.dtype == ml_dtypes.bfloat16:
        tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor.numpy()
