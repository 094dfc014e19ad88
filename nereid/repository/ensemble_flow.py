"""Whether an ensemble is decoupled, found from its steps as Triton finds it at load.

Triton follows the data flow from the ensemble's inputs: each tensor carries the decoupled step it
descends from (none for the inputs), a decoupled step starting a new origin for its outputs. A step
whose inputs come from different origins is refused (their responses could not be paired), and so is
an ensemble whose outputs do. The ensemble is decoupled exactly when the flow meets a decoupled step,
whatever its own `model_transaction_policy` says: Triton overwrites that field with the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument


def decoupled_flow(config: mc.ModelConfig, members: Sequence[mc.ModelConfig]) -> bool:
    """True when a step reached from the ensemble's inputs is decoupled; raises for mixed origins."""
    origin = {tensor.name: 0 for tensor in config.input}
    owner = _owners(config)
    origins = 0
    pending = list(zip(config.ensemble_scheduling.step, members, strict=True))
    progressed = True
    while pending and progressed:  # steps may be listed in any order
        progressed = False
        for entry in list(pending):
            step, member = entry
            if not step.input_map or any(tensor not in origin for tensor in step.input_map.values()):
                continue  # not reached yet (a step without inputs never is, as in Triton)
            sources = [origin[tensor] for tensor in step.input_map.values()]
            first_output = next(iter(step.output_map.values()), "")
            _check_single_origin(config.name, owner.get(first_output, step.model_name), sources)
            label = sources[0]
            if member.model_transaction_policy.decoupled:
                origins += 1
                label = origins
            for tensor in step.output_map.values():
                origin[tensor] = label
            pending.remove(entry)
            progressed = True
    if all(tensor.name in origin for tensor in config.output):
        _check_single_origin(config.name, config.name, [origin[tensor.name] for tensor in config.output])
    return origins != 0


def _owners(config: mc.ModelConfig) -> dict[str, str]:
    """The model Triton names for each ensemble tensor in this check: the first to mention it (the
    ensemble for its own inputs and outputs, else the first step that maps it)."""
    owner = {tensor.name: config.name for tensor in (*config.input, *config.output)}
    for step in config.ensemble_scheduling.step:
        for tensor in (*step.input_map.values(), *step.output_map.values()):
            owner.setdefault(tensor, step.model_name)
    return owner


def _check_single_origin(ensemble: str, model: str, sources: list[int]) -> None:
    if len(set(sources)) > 1:
        raise InvalidArgument(
            f"in ensemble {ensemble}, step of model '{model}' receives inputs originated from different "
            "decoupled models"
        )
