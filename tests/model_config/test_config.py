from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import ModelConfigError
from nereid.model_config import config_from_json, config_to_json, read_config, validate_config
from nereid.model_config.parse import ConfigSource, parse_config_text

GOOD = """
name: "m"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def _validate(text: str, name: str = "m") -> None:
    source = ConfigSource(Path("/repo/m/config.pbtxt"), text)
    validate_config(parse_config_text(text, source), source, name)


def test_parse_error_names_file_line_column_and_suggests_the_field() -> None:
    text = 'name: "m"\ninput [ { name: "a" dim: [1] } ]\n'
    with pytest.raises(ModelConfigError) as info:
        parse_config_text(text, ConfigSource(Path("/repo/m/config.pbtxt"), text))
    message = info.value.message
    assert message.startswith("/repo/m/config.pbtxt:2:")
    assert 'no field named "dim"' in message
    assert 'did you mean "dims"?' in message


def test_good_config_validates() -> None:
    _validate(GOOD)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace('name: "m"', 'name: "other"'), "does not match the model directory 'm'"),
        (GOOD.replace("max_batch_size: 4", "max_batch_size: -1"), "'max_batch_size' must be non-negative"),
        (GOOD.replace("dims: [ 3 ] } ]\noutput", "dims: [ 0 ] } ]\noutput"), "each dimension must be >= 1"),
        (
            GOOD.replace('input [ { name: "IN"', 'input [ { name: "OUT2" }, { name: "IN"'),
            "input 'OUT2' must specify 'data_type'",
        ),
        (
            GOOD.replace(
                '{ name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] }',
                '{ name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] }',
            ),
            "output 'OUT' is declared more than once",
        ),
        (
            GOOD.replace("dims: [ 3 ] } ]\noutput", "dims: [ 3 ] reshape { shape: [ 2, 2 ] } } ]\noutput"),
            "element counts must match",
        ),
        (
            GOOD + "dynamic_batching { preferred_batch_size: [ 8 ] }",
            "preferred_batch_size 8 must be in [1, max_batch_size (4)]",
        ),
        (GOOD + "instance_group [ { count: -2 } ]", "count must be at least 1"),
    ],
)
def test_invalid_configs_are_reported_with_their_line(text: str, expected: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        _validate(text)
    assert expected in info.value.message
    assert "/repo/m/config.pbtxt" in info.value.message


def test_error_line_points_at_the_tensor() -> None:
    text = GOOD.replace("dims: [ 3 ] } ]\noutput", "dims: [ -2 ] } ]\noutput")
    with pytest.raises(ModelConfigError) as info:
        _validate(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if '"IN"' in row)
    assert f"config.pbtxt:{line}:" in info.value.message


def test_custom_config_name_is_preferred(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "config.pbtxt").write_text('name: "m" max_batch_size: 1')
    (tmp_path / "configs" / "small.pbtxt").write_text('name: "m" max_batch_size: 2')
    assert read_config(tmp_path, "small")[0].max_batch_size == 2
    assert read_config(tmp_path, "missing")[0].max_batch_size == 1
    assert read_config(tmp_path)[0].max_batch_size == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    config, source = read_config(empty)
    assert source.path is None and config == mc.ModelConfig()


def test_json_form_prints_int64_as_numbers_and_round_trips() -> None:
    config = parse_config_text(
        GOOD + "version_policy { specific { versions: [ 1, 3 ] } }\n"
        "dynamic_batching { max_queue_delay_microseconds: 100 default_queue_policy { default_timeout_microseconds: 5 } }",
        ConfigSource(None),
    )
    data = config_to_json(config)
    assert data["input"][0]["dims"] == [3]
    assert data["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert data["dynamic_batching"]["default_queue_policy"]["default_timeout_microseconds"] == 5
    assert list(data)[:4] == ["name", "platform", "backend", "runtime"]
    assert config_from_json(data) == config


def test_json_config_takes_one_object_for_a_repeated_field() -> None:
    config = config_from_json(
        {
            "name": "m",
            "instance_group": {"kind": "KIND_CPU", "count": 5},
            "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [1]}],
            "sequence_batching": {
                "control_input": {"name": "START", "control": {"kind": "CONTROL_SEQUENCE_START"}}
            },
        }
    )
    assert [(g.kind, g.count) for g in config.instance_group] == [(mc.ModelInstanceGroup.KIND_CPU, 5)]
    assert [i.name for i in config.input] == ["I"]
    assert (
        config.sequence_batching.control_input[0].control[0].kind
        == mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'max_batch_size: 8\ninput [\n  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ]\n]\n',
            "config.pbtxt:4:1: ']': Expected identifier or number, got ]. "
            "(the '{' opened on line 3 is not closed before this ']')",
        ),
        (
            'name: "a { [ # }"  # a } in a comment\ninput [\n  { name: "x" }\n',
            "(the '[' opened on line 2 is never closed)",
        ),
        ('name: "x" }\n', "(this '}' on line 1 closes nothing)"),
    ],
)
def test_a_bracket_left_open_is_named_with_its_line(text: str, message: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_config_text(text, ConfigSource(Path("config.pbtxt"), text))
    assert info.value.message.endswith(message)
