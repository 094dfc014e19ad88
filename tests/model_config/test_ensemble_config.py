"""An ensemble's own configuration checks: steps, maps, and tensors reachable from the inputs."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import ModelConfigError
from nereid.model_config.ensemble import step_models, validate_ensemble_config

IO = 'name: "e" platform: "ensemble" input [ { name: "IN" } ] output [ { name: "OUT" } ] '


def _config(steps: str) -> mc.ModelConfig:
    return text_format.Parse(IO + f"ensemble_scheduling {{ step [ {steps} ] }}", mc.ModelConfig())


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}"{maps} }}'


def test_a_valid_dag() -> None:
    config = _config(
        ", ".join(
            [
                _step("m", {"I": "IN"}, {"O": "a"}),
                _step("n", {"I": "IN"}, {"O": "b"}),
                _step("j", {"A": "a", "B": "b"}, {"O": "OUT"}),
            ]
        )
    )
    validate_ensemble_config(config)
    assert step_models(config) == {"m", "n", "j"}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("", "must specify 'step' for ensemble 'e'"),
        (_step("", {"I": "IN"}, {"O": "OUT"}), "must specify 'model_name' in step 0 of ensemble 'e'"),
        (_step("m", {"I": "x"}, {"O": "OUT"}), "ensemble input 'IN' for ensemble e' is not used"),
        (_step("m", {"I": "IN"}, {"O": "x"}), "ensemble output 'OUT' for ensemble e' is not used"),
        (
            _step("m", {"I": "IN"}, {"O": "OUT"}) + ", " + _step("n", {"I": "IN"}, {"O": "OUT"}),
            "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1",
        ),
        (
            _step("m", {"I": "IN", "J": "ghost"}, {"O": "OUT"}),
            "ensemble tensor 'ghost' is unused in ensemble 'e': step 0 ('m') reads it, but it is neither an "
            "ensemble input nor in any step's output map",
        ),
        (
            ", ".join(
                [
                    _step("m", {"I": "IN", "J": "y"}, {"O": "x"}),
                    _step("n", {"I": "x"}, {"O": "y"}),
                    _step("o", {"I": "IN"}, {"O": "OUT"}),
                ]
            ),
            "ensemble tensor 'y' is unused in ensemble 'e': the steps that would produce it depend on it "
            "themselves (a cycle through step 0 ('m') -> step 1 ('n') -> step 0 ('m'))",
        ),
    ],
)
def test_invalid_configurations(steps: str, message: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        validate_ensemble_config(_config(steps))
    assert caught.value.message == message
