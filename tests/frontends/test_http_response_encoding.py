"""The HTTP response body: binary outputs' JSON entries and bytes, whichever way their arrays are held."""

from __future__ import annotations

import numpy as np
import orjson

from nereid.frontends.http import codec
from nereid.frontends.http.codec import encode_infer_response
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

_BINARY = InferRequest("m", "", [], [RequestedOutput("OUT", True)])


def _encode(tensor: InferTensor, response_id: str = "") -> tuple[dict, bytes]:
    body, header_length = encode_infer_response(InferResponse("m", "1", [tensor], response_id), _BINARY)
    assert header_length is not None
    return orjson.loads(body[:header_length]), body[header_length:]


def test_a_binary_output_is_described_and_written_alike_each_time() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = encode_infer_response(
        InferResponse("m", "1", [InferTensor("OUT", "FP32", (2, 3), data)]), _BINARY
    )
    again = encode_infer_response(
        InferResponse("m", "1", [InferTensor("OUT", "FP32", (2, 3), data)]), _BINARY
    )
    assert first == again
    header, blob = _encode(InferTensor("OUT", "FP32", (2, 3), data), "req-7")
    assert header == {
        "id": "req-7",
        "model_name": "m",
        "model_version": "1",
        "outputs": [
            {"name": "OUT", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}
        ],
    }
    assert blob == data.tobytes()


def test_binary_outputs_are_little_endian_row_major_bytes_of_their_datatype() -> None:
    expected = np.arange(6, dtype="<f4").reshape(2, 3)
    for array in (
        expected.astype(">f4"),  # big-endian
        np.asfortranarray(expected),  # column-major
        expected.T.copy().T,  # a view whose strides are not row-major
        expected.astype(np.float64),  # another dtype than the datatype's
    ):
        header, blob = _encode(InferTensor("OUT", "FP32", (2, 3), array))
        assert header["outputs"][0]["parameters"] == {"binary_data_size": 24}
        assert blob == expected.tobytes()


def test_a_shape_given_as_a_list_is_written_as_one() -> None:
    data = np.zeros((1, 4), dtype=np.int32)
    header, blob = _encode(InferTensor("OUT", "INT32", [1, 4], data))  # type: ignore[arg-type]
    assert header["outputs"][0]["shape"] == [1, 4]
    assert blob == bytes(16)


def test_the_described_entries_kept_are_bounded_when_shapes_vary_without_end() -> None:
    for length in range(codec._MAX_BINARY_ENTRIES + 10):
        data = np.zeros(length, dtype=np.uint8)
        header, blob = _encode(InferTensor("OUT", "UINT8", (length,), data))
        assert header["outputs"][0]["shape"] == [length] and len(blob) == length
        assert len(codec._BINARY_ENTRIES) <= codec._MAX_BINARY_ENTRIES
