"""Input data that does not fit its shape: reported for the last such input of the request, as Triton
does, over HTTP, gRPC and shared memory; too many strings are counted to one past the shape."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb

from nereid.core.admission import _read_shared_memory_inputs
from nereid.errors import InputDataError, InvalidArgument
from nereid.frontends.grpc.codec import decode_infer_request as decode_grpc
from nereid.frontends.http.codec import decode_infer_request as decode_http
from nereid.shared_memory import SharedMemoryRef, SharedMemoryRegistry
from nereid.types import InferRequest, InferTensor

Tensor = pb.ModelInferRequest.InferInputTensor


def _strings(count: int) -> bytes:
    return b"".join(struct.pack("<I", 1) + b"7" for _ in range(count))


def _grpc(*inputs: tuple[str, str, list[int], bytes]) -> str:
    message = pb.ModelInferRequest(
        model_name="m",
        inputs=[Tensor(name=name, datatype=datatype, shape=shape) for name, datatype, shape, _ in inputs],
        raw_input_contents=[data for *_, data in inputs],
    )
    with pytest.raises(InvalidArgument) as info:
        decode_grpc(message)
    return info.value.message


def _http(*inputs: tuple[str, str, list[int], bytes], extra: bytes = b"") -> str:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": shape,
                    "parameters": {"binary_data_size": len(data)},
                }
                for name, datatype, shape, data in inputs
            ]
        }
    )
    body = header + b"".join(data for *_, data in inputs) + extra
    with pytest.raises(InvalidArgument) as info:
        decode_http(body, len(header), "m", "")
    return info.value.message


@pytest.mark.parametrize("decode", [_grpc, _http])
def test_of_two_inputs_with_too_few_strings_the_last_is_reported(decode: Any) -> None:
    short = ("INPUT0", "BYTES", [1, 16], _strings(14))
    other = ("INPUT1", "BYTES", [1, 16], _strings(14))
    assert "16 string elements for inference input 'INPUT1' for model 'm', got 14" in decode(short, other)
    assert "16 string elements for inference input 'INPUT0' for model 'm', got 14" in decode(other, short)


@pytest.mark.parametrize("decode", [_grpc, _http])
def test_too_many_strings_are_counted_to_one_past_the_shape(decode: Any) -> None:
    good = ("INPUT1", "BYTES", [1, 16], _strings(16))
    assert decode(("INPUT0", "BYTES", [1, 16], _strings(18)), good).endswith(
        "unexpected number of string elements 17 for inference input 'INPUT0' for model 'm', expecting 16"
    )
    # counting stops there: an element past the shape that would not even parse is not read
    broken = _strings(16) + struct.pack("<I", 100) + b"x"
    assert "unexpected number of string elements 17" in decode(("INPUT0", "BYTES", [1, 16], broken), good)


@pytest.mark.parametrize("decode", [_grpc, _http])
def test_of_two_inputs_with_wrong_byte_sizes_the_last_is_reported(decode: Any) -> None:
    first = ("INPUT0", "INT32", [1, 16], b"\0" * 60)
    second = ("INPUT1", "INT32", [1, 16], b"\0" * 56)
    assert decode(first, second).endswith("input 'INPUT1' for model 'm'. Expected 64, got 56")
    assert decode(second, first).endswith("input 'INPUT0' for model 'm'. Expected 64, got 60")


def test_a_protocol_error_comes_before_the_data_errors() -> None:
    bad = ("INPUT0", "INT32", [1, 16], b"\0" * 60)
    message = _http(bad, extra=b"\0")
    assert message == "unexpected additional input data for model 'm'"


@pytest.fixture
def region() -> Iterator[SharedMemoryRegistry]:
    key = f"/nereid_test_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("r", key, 64)
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    try:
        yield registry
    finally:
        registry.unregister_system("r")
        shm.destroy_shared_memory_region(handle)


def test_shared_memory_inputs_report_the_last_wrong_byte_size(region: SharedMemoryRegistry) -> None:
    def tensor(name: str, size: int) -> InferTensor:
        ref = SharedMemoryRef("r", 0, size)
        return InferTensor(name, "INT32", (1, 4), np.empty(0, np.uint8), {}, ref)

    request = InferRequest("m", "", [tensor("INPUT0", 12), tensor("INPUT1", 8)], None, "")
    with pytest.raises(InputDataError, match="input 'INPUT1' for model 'm'. Expected 16, got 8"):
        _read_shared_memory_inputs(region, SimpleNamespace(name="m"), request)  # type: ignore[arg-type]
