"""What the framework backends (ONNX Runtime, PyTorch, TensorFlow, OpenVINO, FIL, TensorRT) share: the
model's own view of its tensors, auto-complete and checks of the config against it, parameters, and refusing
KIND_GPU."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.batching import execute_batched
from nereid.datatypes import config_to_wire, numpy_dtype
from nereid.errors import ModelConfigError, NereidError, Unavailable
from nereid.host import available_cpus
from nereid.model_config.sequence import state_outputs, supplied_inputs

N = TypeVar("N", int, float)
T = TypeVar("T")
# Checks a config tensor's dims against the model's shape: (config, kind, tensor, model shape).
DimsCheck = Callable[[mc.ModelConfig, str, Any, Sequence[int]], None]


@dataclass(frozen=True)
class ModelTensor:
    """A tensor as the model file describes it. `shape` holds -1 for variable dimensions, and is None
    when the format does not say (then the config must)."""

    name: str
    data_type: int  # mc.DataType; TYPE_INVALID when the format does not say, or has no such type
    shape: tuple[int, ...] | None
    # How the format names the data type, in messages; a format that names it has its type checked even
    # when Triton has no equivalent (that model tensor cannot be served).
    type_name: str = ""


def execute(
    requests: Sequence[BackendRequest], run_request: Callable[[BackendRequest], Outputs]
) -> list[BackendResult]:
    """Run several requests as one framework call (the helper concatenates and splits them)."""
    if len(requests) == 1:
        try:
            return [run_request(requests[0])]
        except NereidError as exc:
            return [exc]
    return execute_batched(requests, run_request)


def per_request(
    requests: Sequence[BackendRequest], run: Callable[[BackendRequest], Outputs]
) -> list[BackendResult]:
    """Run each request on its own; a NereidError fails that request alone, as Triton's backends do."""
    results: list[BackendResult] = []
    for request in requests:
        try:
            results.append(run(request))
        except NereidError as exc:
            results.append(exc)
    return results


def numpy_type(data_type: int) -> np.dtype:
    return numpy_dtype(config_to_wire(mc.DataType.Name(data_type)))


def parameters(config: mc.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def int_parameter(config: mc.ModelConfig, key: str, default: int) -> int:
    return _number_parameter(config, key, default, int, "an integer")


def float_parameter(config: mc.ModelConfig, key: str, default: float) -> float:
    return _number_parameter(config, key, default, float, "a number")


def _number_parameter(config: mc.ModelConfig, key: str, default: N, cast: Callable[[str], N], what: str) -> N:
    text = parameters(config).get(key)
    if text is None or text.strip() == "":
        return default
    try:
        return cast(text)
    except ValueError:
        raise ModelConfigError(
            f"model '{config.name}': parameter '{key}' must be {what}, got '{text}'"
        ) from None


def bool_parameter(config: mc.ModelConfig, key: str, default: bool) -> bool:
    text = parameters(config).get(key)
    if text is None or text.strip() == "":
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ModelConfigError(f"model '{config.name}': parameter '{key}' must be true or false, got '{text}'")


def threads_per_instance(config: mc.ModelConfig) -> int:
    """The cores this process may run on, shared among the model's instances (at least one thread each):
    a thread pool per instance as large as the host runs more threads than a small host has cores."""
    return max(1, available_cpus() // max(1, sum(group.count for group in config.instance_group)))


def no_gpu(spec: InstanceSpec, framework: str, hint: str) -> Unavailable:
    return Unavailable(
        f"instance '{spec.instance_name}' of model '{spec.model_name}' asks for KIND_GPU, but {framework} "
        f"has no CUDA device here ({hint})"
    )


def model_file_missing(model_file: object) -> Unavailable:
    return Unavailable(f"model file not found: '{model_file}'")


def complete_io(
    config: mc.ModelConfig,
    model_inputs: Sequence[ModelTensor],
    model_outputs: Sequence[ModelTensor],
    default_max_batch_size: int,
    omit_inputs: Collection[str] = (),
    omit_outputs: Collection[str] = (),
) -> None:
    """Triton's auto-complete: a config without inputs, outputs and max_batch_size becomes batchable when
    every tensor's first dimension is variable; then tensors the config lacks are added (except those
    named in `omit_inputs` / `omit_outputs`, and the sequence batcher's control and state tensors), and
    listed ones without data type or dims get the model's."""
    omit_inputs = set(omit_inputs) | supplied_inputs(config)
    omit_outputs = set(omit_outputs) | state_outputs(config)
    if config.max_batch_size == 0 and not config.input and not config.output:
        shapes = [t.shape for t in [*model_inputs, *model_outputs]]
        # Scalars say nothing about batching; a tensor of unknown shape keeps the model unbatched.
        batchable = all(s is not None for s in shapes) and all(s[0] < 0 for s in shapes if s)
        if batchable and default_max_batch_size > 0:
            config.max_batch_size = default_max_batch_size
            if not config.HasField("sequence_batching") and not config.HasField("dynamic_batching"):
                config.dynamic_batching.SetInParent()
    skip = 1 if config.max_batch_size > 0 else 0
    complete_tensors(config.input, [t for t in model_inputs if t.name not in omit_inputs], skip)
    complete_tensors(config.output, [t for t in model_outputs if t.name not in omit_outputs], skip)


def complete_tensors(tensors: Any, model_tensors: Iterable[ModelTensor], skip: int) -> None:
    """Add tensors the config lacks; fill data_type/dims of listed ones that leave them out."""
    listed = {t.name: t for t in tensors}
    for model_tensor in model_tensors:
        tensor = listed.get(model_tensor.name)
        if tensor is None:
            tensor = tensors.add(name=model_tensor.name)
        if tensor.data_type == mc.TYPE_INVALID:
            tensor.data_type = model_tensor.data_type
        if not tensor.dims and not tensor.HasField("reshape") and model_tensor.shape is not None:
            dims = list(model_tensor.shape[skip:])
            if dims:
                tensor.dims.extend(dims)
            else:
                tensor.dims.append(1)
                tensor.reshape.SetInParent()


def check_io(
    config: mc.ModelConfig,
    kind: str,
    tensors: Any,  # the config's repeated ModelInput or ModelOutput
    model_tensors: Sequence[ModelTensor],
    require_all: bool,
    omit: Collection[str] = (),
    dims_check: DimsCheck | None = None,
) -> None:
    """The config's tensors exist in the model with its data types and dims (where the model says). The
    sequence batcher supplies its control and state inputs, so the config need not list them, nor the
    model tensors named in `omit`. `dims_check` replaces `check_dims` for a backend with rules of its own."""
    supplied = (supplied_inputs(config) if kind == "input" else set()) | set(omit)
    by_name = {t.name: t for t in model_tensors if t.name not in supplied}
    for tensor in tensors:
        model_tensor = model_tensor_for(config, kind, tensor.name, by_name)
        known = model_tensor.data_type != mc.TYPE_INVALID or model_tensor.type_name
        if known and model_tensor.data_type != tensor.data_type:
            raise ModelConfigError(
                f"model '{config.name}': {kind} '{tensor.name}' has data type "
                f"{mc.DataType.Name(tensor.data_type)} in the configuration but "
                f"{model_tensor.type_name or mc.DataType.Name(model_tensor.data_type)} in the model"
            )
        if model_tensor.shape is not None:
            (dims_check or check_dims)(config, kind, tensor, model_tensor.shape)
    if require_all:
        listed = {t.name for t in tensors}
        missing = [name for name in by_name if name not in listed]
        if missing:
            raise ModelConfigError(
                f"model '{config.name}': the configuration does not list model {kind}s {missing}"
            )


def model_tensor_for(config: mc.ModelConfig, kind: str, name: str, by_name: dict[str, T]) -> T:
    """The model's tensor that a config tensor names."""
    model_tensor = by_name.get(name)
    if model_tensor is None:
        raise ModelConfigError(
            f"model '{config.name}': unexpected {kind} '{name}' in the configuration; "
            f"the model's {kind}s are {sorted(by_name)}"
        )
    return model_tensor


def check_dims(
    config: mc.ModelConfig, kind: str, tensor: mc.ModelInput | mc.ModelOutput, model_shape: Sequence[int]
) -> None:
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    shape = list(model_shape)
    if config.max_batch_size > 0:
        if not shape or shape[0] >= 0:
            raise ModelConfigError(
                f"model '{config.name}': {kind} '{tensor.name}': max_batch_size is {config.max_batch_size} "
                f"but the model's first dimension is {shape[0] if shape else 'missing'}, not a variable "
                "batch dimension"
            )
        shape = shape[1:]
    if len(dims) != len(shape) or any(m >= 0 and d != m for d, m in zip(dims, shape, strict=False)):
        raise ModelConfigError(
            f"model '{config.name}': {kind} '{tensor.name}' has dims {dims} in the configuration "
            f"(after the batch dimension) but the model expects {shape}"
        )
