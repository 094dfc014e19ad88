"""Checks a completed ModelConfig the way Triton does at load, with errors that point at the file."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument, ModelConfigError
from nereid.model_config.parse import ConfigSource

_Report = Callable[[str | None, str], None]


def validate_config(config: mc.ModelConfig, source: ConfigSource, model_dir_name: str) -> None:
    problems: list[str] = []

    def problem(needle: str | None, text: str) -> None:
        problems.append(f"{source.where(needle)}: {text}")

    if config.name != model_dir_name:
        problem(
            "name:",
            f"model name '{config.name}' in the configuration does not match the model directory "
            f"'{model_dir_name}'",
        )
    if config.max_batch_size < 0:
        problem("max_batch_size", "'max_batch_size' must be non-negative")

    _check_tensors("input", config.input, problem)
    _check_tensors("output", config.output, problem)

    if config.HasField("dynamic_batching"):
        for size in config.dynamic_batching.preferred_batch_size:
            if size < 1 or size > max(config.max_batch_size, 0):
                problem(
                    "preferred_batch_size",
                    f"dynamic_batching preferred_batch_size {size} must be in [1, max_batch_size "
                    f"({config.max_batch_size})]",
                )
    for index, group in enumerate(config.instance_group):
        if group.count < 1:
            problem("count", f"instance_group[{index}] count must be at least 1, got {group.count}")
    if config.version_policy.WhichOneof("policy_choice") == "latest":
        if config.version_policy.latest.num_versions < 1:
            problem("num_versions", "version_policy latest num_versions must be at least 1")

    if problems:
        raise ModelConfigError(
            f"invalid model configuration for model '{model_dir_name}':\n  " + "\n  ".join(problems)
        )


def check_response_cache(config: mc.ModelConfig, decoupled: bool) -> None:
    """Triton refuses `response_cache { enable: true }` on a decoupled model (for an ensemble: one with a
    decoupled step), whether or not the server has a cache: its responses are a stream, not one answer."""
    if config.response_cache.enable and decoupled:
        raise InvalidArgument(
            f"Response Cache does not currently support model {config.name} with 'decoupled' transaction "
            "policy. Please disable the response cache."
        )


def _check_tensors(
    kind: str,
    tensors: Iterable[mc.ModelInput] | Iterable[mc.ModelOutput],
    problem: _Report,
) -> None:
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        label = f"{kind} '{tensor.name}'" if tensor.name else f"{kind}[{index}]"
        needle = f'"{tensor.name}"' if tensor.name else None
        if not tensor.name:
            problem(None, f"{label} must specify 'name'")
        elif tensor.name in seen:
            problem(needle, f"{label} is declared more than once")
        seen.add(tensor.name)
        if tensor.data_type == mc.TYPE_INVALID:
            problem(needle, f"{label} must specify 'data_type'")
        has_reshape = tensor.HasField("reshape")
        if not tensor.dims and not has_reshape:
            problem(needle, f"{label} must specify 'dims'")
        if any(d == 0 or d < -1 for d in tensor.dims):
            problem(
                needle,
                f"{label} dims {list(tensor.dims)}: each dimension must be >= 1, or -1 for a "
                "variable-size dimension",
            )
        if has_reshape:
            _check_reshape(label, needle, tensor.dims, tensor.reshape.shape, problem)


def _check_reshape(
    label: str, needle: str | None, dims: Sequence[int], shape: Sequence[int], problem: _Report
) -> None:
    if any(d == 0 or d < -1 for d in shape):
        problem(needle, f"{label} reshape {list(shape)}: each dimension must be >= 1, or -1")
        return
    dims_variable = sum(1 for d in dims if d == -1)
    shape_variable = sum(1 for d in shape if d == -1)
    if dims_variable == 0 and shape_variable == 0:
        if math.prod(dims) != math.prod(shape):
            problem(
                needle,
                f"{label} has dims {list(dims)} ({math.prod(dims)} elements) but reshape "
                f"{list(shape)} ({math.prod(shape)} elements): element counts must match",
            )
    elif (dims_variable == 0) != (shape_variable == 0):
        problem(
            needle,
            f"{label}: dims {list(dims)} and reshape {list(shape)} must both have, or both lack, "
            "variable-size dimensions",
        )
