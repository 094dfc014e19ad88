"""Sequence parameters in HTTP infer bodies: the types Triton takes, and its texts for the others."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from nereid.errors import InternalError, InvalidArgument, Unsupported
from nereid.frontends.http.codec import decode_infer_request
from nereid.types import SEQUENCE_START, InferRequest


def _decode(parameters: dict[str, Any]) -> InferRequest:
    body = {
        "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}],
        "parameters": parameters,
    }
    return decode_infer_request(orjson.dumps(body), None, "m", "")


@pytest.mark.parametrize("sequence_id", [1, 2**64 - 1, "user-1", ""])
def test_uint64_and_string_ids_are_taken(sequence_id: int | str) -> None:
    request = _decode({"sequence_id": sequence_id, "sequence_start": True, "custom": 1})
    assert (request.sequence_id, request.flags, request.parameters) == (
        sequence_id,
        SEQUENCE_START,
        {"custom": 1},
    )


@pytest.mark.parametrize("sequence_id", [-3, 1.5, True])
def test_other_ids_are_refused_with_tritons_text(sequence_id: object) -> None:
    with pytest.raises(
        InternalError, match=r"^Unable to parse 'sequence_id': attempt to access JSON non-string"
    ):
        _decode({"sequence_id": sequence_id})


@pytest.mark.parametrize("key", ["sequence_start", "sequence_end"])
@pytest.mark.parametrize("value", [1, "true", 0.0])
def test_flags_must_be_booleans(key: str, value: object) -> None:
    with pytest.raises(InternalError, match=f"^Unable to parse '{key}': attempt to access JSON non-boolean"):
        _decode({"sequence_id": 3, key: value})


@pytest.mark.parametrize("key", ["triton_enable_empty_final_response", "triton_final_response", "triton_x"])
def test_triton_prefixed_keys_are_refused_with_tritons_text(key: str) -> None:
    with pytest.raises(
        InvalidArgument, match=r"^parameter keys starting with 'triton_' are reserved for Triton usage and"
    ):
        _decode({key: True, "custom": 1})


@pytest.mark.parametrize("key", ["priority", "timeout"])
@pytest.mark.parametrize("value", [-1, -5, 1.5, "3", True])
def test_priority_and_timeout_must_be_uint64(key: str, value: object) -> None:
    with pytest.raises(
        InternalError,
        match=f"^Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer$",
    ):
        _decode({key: value})


def test_priority_and_timeout_in_range_are_taken() -> None:
    request = _decode({"priority": 2**64 - 1, "timeout": 0})
    assert (request.priority, request.timeout_us) == (2**64 - 1, 0)


def test_a_string_id_over_128_bytes_is_refused_with_tritons_status_and_text() -> None:
    assert _decode({"sequence_id": "s" * 128}).sequence_id == "s" * 128
    with pytest.raises(Unsupported, match=r"^string correlation ID cannot be longer than 128 characters$"):
        _decode({"sequence_id": "s" * 129})
