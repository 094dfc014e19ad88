"""Control inputs and implicit state as the sequence batcher adds them to requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import SEQUENCE_END, SEQUENCE_START, BackendRequest
from nereid.errors import InvalidArgument, ModelConfigError
from nereid.model_config.sequence import check_sequence_batching, fill_sequence_defaults, supplied_inputs
from nereid.scheduling.sequence_tensors import SequenceTensors

CONTROLS = """
  control_input [
    { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 5, 9 ] } ] },
    { name: "E" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0.5, 1.5 ] } ] },
    { name: "R" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
"""


def _config(max_batch_size: int, batching: str) -> mc.ModelConfig:
    return text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} sequence_batching {{ {batching} }}', mc.ModelConfig()
    )


def _request(correlation_id: int | str, flags: int, rows: int = 1) -> BackendRequest:
    return BackendRequest(
        {"IN": np.zeros((rows, 2), dtype=np.float32)}, ("OUT",), correlation_id=correlation_id, flags=flags
    )


def _controls(corrid_type: str = "TYPE_UINT64", max_batch_size: int = 4) -> SequenceTensors:
    return SequenceTensors(_config(max_batch_size, CONTROLS % corrid_type), Path("."))


@pytest.mark.parametrize(
    ("flags", "start"),
    [(SEQUENCE_START, 9), (0, 5), (SEQUENCE_END, 5), (SEQUENCE_START | SEQUENCE_END, 9)],
)
def test_flag_controls_take_the_configured_false_and_true_values(flags: int, start: int) -> None:
    inputs = _controls().prepare(_request(3, flags), None).inputs
    assert inputs["S"].dtype == np.int32 and inputs["S"].tolist() == [[start]]
    expected_end = 1.5 if flags & SEQUENCE_END else 0.5
    assert inputs["E"].dtype == np.float32 and inputs["E"].tolist() == [[expected_end]]
    assert inputs["R"].dtype == np.bool_ and inputs["R"].tolist() == [[True]]
    assert inputs["C"].dtype == np.uint64 and inputs["C"].tolist() == [[3]]


@pytest.mark.parametrize(
    ("corrid_type", "correlation_id", "expected"),
    [
        ("TYPE_UINT64", 2**64 - 1, 2**64 - 1),
        ("TYPE_INT64", 2**64 - 1, -1),
        ("TYPE_UINT64", -2, 2**64 - 2),  # a negative gRPC int64 id, as Triton casts it
        ("TYPE_INT32", 7, 7),
        ("TYPE_STRING", "user-1", b"user-1"),
    ],
)
def test_correlation_id_control(corrid_type: str, correlation_id: int | str, expected: object) -> None:
    inputs = _controls(corrid_type).prepare(_request(correlation_id, SEQUENCE_START), None).inputs
    assert inputs["C"].tolist() == [[expected]]


@pytest.mark.parametrize("corrid_type", ["TYPE_UINT64", "TYPE_INT32", "TYPE_UINT32", "TYPE_INT64"])
def test_string_ids_need_a_string_corrid_input(corrid_type: str) -> None:
    expected = corrid_type.removeprefix("TYPE_")
    with pytest.raises(
        InvalidArgument,
        match=f"sequence batching control 'C' data-type is 'BYTES', but model 'm' expects '{expected}'",
    ):
        _controls(corrid_type).check(_request("user", 0))
    _controls(corrid_type).check(_request(5, 0))


def test_numeric_ids_need_an_integer_corrid_input() -> None:
    with pytest.raises(
        InvalidArgument,
        match="sequence batching control 'C' data-type is 'UINT64', but model 'm' expects 'BYTES'",
    ):
        _controls("TYPE_STRING").check(_request(12, SEQUENCE_START))
    _controls("TYPE_STRING").check(_request("user", SEQUENCE_START))


def test_controls_have_one_row_per_batch_row_and_no_batch_dimension_without_batching() -> None:
    inputs = _controls().prepare(_request(3, SEQUENCE_START, rows=3), None).inputs
    assert inputs["S"].tolist() == [[9], [9], [9]]
    assert inputs["C"].shape == (3, 1)
    plain = SequenceTensors(_config(0, CONTROLS % "TYPE_UINT64"), Path("."))
    request = BackendRequest({"IN": np.zeros(2, dtype=np.float32)}, ("OUT",), correlation_id=3, flags=0)
    inputs = plain.prepare(request, None).inputs
    assert inputs["S"].shape == (1,) and inputs["C"].shape == (1,)


def test_state_starts_from_zeros_and_variable_dims_start_at_one() -> None:
    state = 'state [ { input_name: "IS" output_name: "OS" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]'
    tensors = SequenceTensors(_config(4, state), Path("."))
    prepared = tensors.prepare(_request(1, SEQUENCE_START, rows=2), None)
    assert prepared.inputs["IS"].shape == (2, 1, 3) and not prepared.inputs["IS"].any()
    assert prepared.outputs == ("OUT", "OS")


def test_config_defaults_and_checks() -> None:
    config = _config(8, "oldest { max_candidate_sequences: 4 }" + CONTROLS % "TYPE_UINT64")
    fill_sequence_defaults(config)
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [8]
    assert supplied_inputs(config) == {"S", "E", "R", "C"}
    check_sequence_batching(config)
    bad = _config(8, 'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]')
    with pytest.raises(ModelConfigError, match="exactly one of int32_false_true"):
        check_sequence_batching(bad)
    bad = _config(8, CONTROLS % "TYPE_FP32")
    with pytest.raises(ModelConfigError, match="control input 'C'.*must have data_type"):
        check_sequence_batching(bad)


def _file_state(tmp_path: Path, data_type: str, dims: str, data: bytes) -> SequenceTensors:
    (tmp_path / "initial_state").mkdir(exist_ok=True)
    (tmp_path / "initial_state" / "init").write_bytes(data)
    state = (
        f'state [ {{ input_name: "IS" output_name: "OS" data_type: {data_type} dims: [ {dims} ] '
        f'initial_state {{ name: "s" data_type: {data_type} dims: [ {dims} ] data_file: "init" }} }} ]'
    )
    return SequenceTensors(_config(0, state), tmp_path)


def test_initial_state_files_as_triton_reads_them(tmp_path: Path) -> None:
    """A longer file gives its leading bytes; a STRING state takes length-prefixed elements, or the whole
    file as its one element (Triton passes STRING files through unchecked)."""
    start = _request(1, SEQUENCE_START)
    longer = _file_state(tmp_path, "TYPE_INT32", "1", b"\x64\x00\x00\x00\x01\x02")
    assert longer.prepare(start, None).inputs["IS"].tolist() == [100]
    with pytest.raises(ModelConfigError, match="holds 2 bytes, but state 'IS' of shape \\[1\\] needs 4"):
        _file_state(tmp_path, "TYPE_INT32", "1", b"\x64\x00")
    raw = _file_state(tmp_path, "TYPE_STRING", "1", b"\x64\x00\x00\x00")
    assert raw.prepare(start, None).inputs["IS"].tolist() == [b"\x64\x00\x00\x00"]
    prefixed = _file_state(tmp_path, "TYPE_STRING", "2", b"\x01\x00\x00\x00a\x02\x00\x00\x00bc")
    assert prefixed.prepare(start, None).inputs["IS"].tolist() == [b"a", b"bc"]
    with pytest.raises(ModelConfigError, match="must hold its 2 elements length-prefixed"):
        _file_state(tmp_path, "TYPE_STRING", "2", b"\x64\x00\x00\x00")
