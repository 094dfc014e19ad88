"""Checks of an ensemble's own configuration: its steps form a DAG over named tensors that starts at
the ensemble's inputs and reaches its outputs. Checks against the composing models need them loaded
(nereid.repository.ensemble). Where Triton reports the same problem, the text is Triton's."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import ModelConfigError

ENSEMBLE_PLATFORM = "ensemble"


def is_ensemble(config: mc.ModelConfig) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


def step_models(config: mc.ModelConfig) -> frozenset[str]:
    """The models an ensemble's steps call."""
    return frozenset(step.model_name for step in config.ensemble_scheduling.step if step.model_name)


def validate_ensemble_config(config: mc.ModelConfig) -> None:
    name = config.name
    steps = config.ensemble_scheduling.step
    if not steps:
        raise ModelConfigError(f"must specify 'step' for ensemble '{name}'")
    producers: dict[str, int] = {}  # tensor -> the step whose output map writes it
    consumed: set[str] = set()
    for index, step in enumerate(steps):
        if not step.model_name:
            raise ModelConfigError(f"must specify 'model_name' in step {index} of ensemble '{name}'")
        if not step.input_map:
            raise ModelConfigError(f"must specify 'input_map' in step {index} of ensemble '{name}'")
        if not step.output_map:
            raise ModelConfigError(f"must specify 'output_map' in step {index} of ensemble '{name}'")
        consumed.update(step.input_map.values())
        for tensor in step.output_map.values():
            if tensor in producers:
                raise ModelConfigError(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble "
                    f"'{name}' step {index}"
                )
            producers[tensor] = index
    inputs = [i.name for i in config.input]
    for tensor in inputs:
        if tensor in producers:
            raise ModelConfigError(
                f"ensemble input '{tensor}' for ensemble '{name}' is written by step "
                f"{producers[tensor]} ('{steps[producers[tensor]].model_name}'); ensemble inputs are "
                "read-only"
            )
        if tensor not in consumed:
            raise ModelConfigError(f"ensemble input '{tensor}' for ensemble {name}' is not used")
    for output in config.output:
        if output.name not in producers:
            raise ModelConfigError(f"ensemble output '{output.name}' for ensemble {name}' is not used")
    _check_reachable(config, set(inputs), producers, steps)


def _check_reachable(
    config: mc.ModelConfig, inputs: set[str], producers: dict[str, int], steps: list[mc.ModelEnsembling.Step]
) -> None:
    """Run the steps symbolically from the inputs: a tensor never available means a cycle or a gap."""
    available = set(inputs)
    pending = set(range(len(steps)))
    progress = True
    while progress:
        progress = False
        for index in sorted(pending):
            if all(t in available for t in steps[index].input_map.values()):
                available.update(steps[index].output_map.values())
                pending.discard(index)
                progress = True
    if not pending:
        return
    name = config.name
    for index in sorted(pending):
        for tensor in steps[index].input_map.values():
            if tensor in available:
                continue
            prefix = f"ensemble tensor '{tensor}' is unused in ensemble '{name}'"
            if tensor not in producers:
                raise ModelConfigError(
                    f"{prefix}: step {index} ('{steps[index].model_name}') reads it, but it is neither an "
                    "ensemble input nor in any step's output map"
                )
            cycle = _cycle_through(index, producers, steps, available)
            raise ModelConfigError(
                f"{prefix}: the steps that would produce it depend on it themselves (a cycle through "
                + " -> ".join(f"step {i} ('{steps[i].model_name}')" for i in cycle)
                + ")"
            )


def _cycle_through(
    start: int, producers: dict[str, int], steps: list[mc.ModelEnsembling.Step], available: set[str]
) -> list[int]:
    """Steps from `start` up through tensors never available, back to one already seen (a cycle)."""
    path = [start]
    seen = {start}
    current = start
    while True:
        upstream = [
            producers[t] for t in steps[current].input_map.values() if t in producers and t not in available
        ]
        for step in upstream:
            if step in seen:
                return path[path.index(step) :] + [step]
        if not upstream:
            return path
        current = upstream[0]
        path.append(current)
        seen.add(current)
