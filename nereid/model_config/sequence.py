"""What `sequence_batching` adds to a config: defaults Triton fills in, checks, and the tensors the
scheduler supplies (control inputs, implicit state) that the config's `input` list does not name."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import ModelConfigError

# Triton's default for max_sequence_idle_microseconds (one second).
DEFAULT_IDLE_MICROSECONDS = 1_000_000
# The data types a CONTROL_SEQUENCE_CORRID input may take.
CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)
_Kind = mc.ModelSequenceBatching.Control


def fill_sequence_defaults(config: mc.ModelConfig) -> None:
    """The values Triton shows in /config for a sequence model that leaves them out."""
    if not config.HasField("sequence_batching"):
        return
    batching = config.sequence_batching
    if batching.max_sequence_idle_microseconds == 0:
        batching.max_sequence_idle_microseconds = DEFAULT_IDLE_MICROSECONDS
    if batching.HasField("oldest"):
        if not batching.oldest.preferred_batch_size and config.max_batch_size > 0:
            batching.oldest.preferred_batch_size.append(config.max_batch_size)


def supplied_inputs(config: mc.ModelConfig) -> set[str]:
    """Model inputs the sequence batcher fills in: control inputs and implicit state inputs."""
    if not config.HasField("sequence_batching"):
        return set()
    batching = config.sequence_batching
    return {c.name for c in batching.control_input} | {s.input_name for s in batching.state}


def state_outputs(config: mc.ModelConfig) -> set[str]:
    """Model outputs that carry implicit state (clients see them only when `output` lists them)."""
    if not config.HasField("sequence_batching"):
        return set()
    return {s.output_name for s in config.sequence_batching.state}


def check_sequence_batching(config: mc.ModelConfig) -> None:
    """Refuse control and state definitions the sequence batcher could not honour."""
    if not config.HasField("sequence_batching"):
        return
    name = config.name
    batching = config.sequence_batching
    for control_input in batching.control_input:
        if not control_input.name:
            raise ModelConfigError(f"model '{name}': a sequence batching control input must have a name")
        if len(control_input.control) != 1:
            raise ModelConfigError(
                f"model '{name}': sequence batching control input '{control_input.name}' must have exactly "
                f"one control, it has {len(control_input.control)}"
            )
        control = control_input.control[0]
        kind = _Kind.Kind.Name(control.kind)
        if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
            if control.data_type not in CORRID_TYPES:
                raise ModelConfigError(
                    f"model '{name}': control input '{control_input.name}' ({kind}) must have data_type "
                    f"TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING"
                )
            continue
        given = [
            field
            for field in ("int32_false_true", "fp32_false_true", "bool_false_true")
            if len(getattr(control, field))
        ]
        if len(given) != 1 or len(getattr(control, given[0])) != 2:
            raise ModelConfigError(
                f"model '{name}': control input '{control_input.name}' ({kind}) must give exactly one of "
                "int32_false_true, fp32_false_true or bool_false_true, with two values (false, true)"
            )
    for state in batching.state:
        if not state.input_name or not state.output_name:
            raise ModelConfigError(f"model '{name}': a sequence state must name input_name and output_name")
        if state.data_type == mc.TYPE_INVALID:
            raise ModelConfigError(
                f"model '{name}': sequence state '{state.input_name}' must have a data_type"
            )
        if len(state.initial_state) > 1:
            raise ModelConfigError(
                f"model '{name}': sequence state '{state.input_name}' may have one initial_state at most"
            )
