"""HTTP infer bodies past Triton's limits get Triton's texts: element counts and byte sizes past int64,
'data' nested too deep; a raw BYTES body is one element; BYTES outputs that are not UTF-8 go out as
binary data only."""

from __future__ import annotations

import gzip
from typing import Any

import numpy as np
import orjson
import pytest

from nereid.errors import InternalError, InvalidArgument
from nereid.frontends.http.codec import decode_infer_request, decode_raw_binary_request, encode_infer_response
from nereid.frontends.http.compression import decompress
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput


def _decode(shape: list[int], data: Any, datatype: str = "FP32") -> None:
    body = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": datatype, "data": data}]}
    decode_infer_request(orjson.dumps(body), None, "m", "")


def test_counts_and_byte_sizes_past_int64_are_refused_with_tritons_texts() -> None:
    with pytest.raises(
        InvalidArgument,
        match=r"^invalid shape for input 'INPUT0': shape \[16,1152921504606846978\] causes total element count "
        r"to exceed maximum size of 9223372036854775807$",
    ):
        _decode([2**4, 2**60 + 2], [1.0])
    with pytest.raises(
        InvalidArgument,
        match=r"^byte size overflow for input 'INPUT0': element count \(4611686018427387912\) \* data type size "
        r"\(4\) exceeds maximum allowed size \(9223372036854775807\)$",
    ):
        _decode([2**2, 2**60 + 2], [1.0])


@pytest.mark.parametrize("datatype, value", [("BYTES", "hello"), ("INT64", 123)])
def test_data_nested_100_deep_is_refused(datatype: str, value: object) -> None:
    def nested(depth: int) -> Any:
        data: Any = value
        for _ in range(depth):
            data = [data]
        return data

    with pytest.raises(InvalidArgument, match=r"^JSON nesting depth exceeds maximum allowed limit \(100\)"):
        _decode([1, 1], nested(120), datatype)
    _decode([1, 1], nested(50), datatype)


def test_a_raw_bytes_body_is_one_element() -> None:
    request = decode_raw_binary_request(b"427", "m", "", "INPUT0", "BYTES", (1, 1))
    assert request.inputs[0].data.tolist() == [[b"427"]]


def test_bytes_that_are_not_utf8_are_refused_as_json_but_sent_as_binary() -> None:
    data = np.array([b"ok", b"\xff\x00"], dtype=object)
    response = InferResponse("m", "1", [InferTensor("OUT", "BYTES", (2,), data)])
    as_json = InferRequest("m", "", [], [RequestedOutput("OUT", binary=False)])
    with pytest.raises(InvalidArgument, match="^output 'OUT' holds bytes that are not valid UTF-8"):
        encode_infer_response(response, as_json)
    body, header_length = encode_infer_response(
        response, InferRequest("m", "", [], [RequestedOutput("OUT", True)])
    )
    assert header_length is not None and body.endswith(b"\x02\x00\x00\x00\xff\x00")


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (15, "Failed to parse 'data' field: shape does not match true shape"),
        (18, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    ],
)
def test_data_that_does_not_fill_its_shape_is_refused_in_tritons_words(count: int, message: str) -> None:
    # Triton's L0_http compares the whole error body, so the text is exactly Triton's.
    data = ",".join(["1"] * count)
    body = f'{{"inputs":[{{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[{data}]}}]}}'
    with pytest.raises(InternalError) as info:
        decode_infer_request(body.encode(), None, "simple", "")
    assert info.value.message == message


def test_a_decompressed_body_past_the_limit_is_refused_in_tritons_words() -> None:
    with pytest.raises(InvalidArgument) as info:
        decompress(gzip.compress(b" " * 2048), "gzip", 1024)
    assert info.value.message == (
        "the decompressed request body exceeds the maximum allowed value of 1024 bytes (--http-max-input-size)"
    )
