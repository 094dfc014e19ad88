"""ModelInferRequest <-> engine types, without a server: Triton's rules for contents, raw bytes and parameters."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.errors import InvalidArgument, NereidError
from nereid.frontends.grpc.codec import decode_infer_request, encode_infer_response
from nereid.shared_memory import SharedMemoryRef
from nereid.types import InferResponse, InferTensor

Tensor = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor


def _tensor(name: str, datatype: str, shape: list[int], **contents: list[Any]) -> Tensor:
    tensor = Tensor(name=name, datatype=datatype, shape=shape)
    for field, values in contents.items():
        getattr(tensor.contents, field).extend(values)
    return tensor


def _request(*inputs: Tensor, **fields: Any) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(model_name="m", inputs=list(inputs), **fields)


def _fails(request: pb.ModelInferRequest, kind: type[NereidError] = InvalidArgument) -> str:
    with pytest.raises(kind) as info:
        decode_infer_request(request)
    return info.value.message


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("BOOL", "bool_contents", [True, False], np.bool_),
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("INT16", "int_contents", [-3, 3], np.int16),
        ("INT32", "int_contents", [1, -2], np.int32),
        ("INT64", "int64_contents", [2**40, -1], np.int64),
        ("UINT8", "uint_contents", [0, 255], np.uint8),
        ("UINT16", "uint_contents", [7, 65535], np.uint16),
        ("UINT32", "uint_contents", [7, 2**32 - 1], np.uint32),
        ("UINT64", "uint64_contents", [2**64 - 1, 0], np.uint64),
        ("FP32", "fp32_contents", [0.5, -1.5], np.float32),
        ("FP64", "fp64_contents", [0.1, 2.0], np.float64),
    ],
)
def test_typed_contents_of_every_datatype(datatype: str, field: str, values: list[Any], dtype: type) -> None:
    request = decode_infer_request(_request(_tensor("IN", datatype, [1, 2], **{field: values})))
    (tensor,) = request.inputs
    assert tensor.data.dtype == dtype and tensor.shape == (1, 2)
    np.testing.assert_array_equal(tensor.data, np.array(values, dtype=dtype).reshape(1, 2))


def test_typed_bytes_and_raw_bytes_give_the_same_tensor() -> None:
    typed = decode_infer_request(_request(_tensor("S", "BYTES", [2], bytes_contents=[b"a", b"\xff\x00"])))
    raw = decode_infer_request(
        _request(
            Tensor(name="S", datatype="BYTES", shape=[2]), raw_input_contents=[b"\1\0\0\0a\2\0\0\0\xff\0"]
        )
    )
    assert list(typed.inputs[0].data) == list(raw.inputs[0].data) == [b"a", b"\xff\x00"]


def test_raw_contents_are_read_in_input_order_without_copy() -> None:
    first = struct.pack("<2i", 1, 2)
    second = struct.pack("<2e", 0.5, 1.5)
    message = _request(
        Tensor(name="A", datatype="INT32", shape=[2]),
        Tensor(name="B", datatype="FP16", shape=[1, 2]),
        raw_input_contents=[first, second],
        id="r1",
    )
    request = decode_infer_request(message)
    assert request.id == "r1" and request.model_name == "m" and request.outputs is None
    np.testing.assert_array_equal(request.inputs[0].data, [1, 2])
    np.testing.assert_array_equal(request.inputs[1].data, np.array([[0.5, 1.5]], dtype=np.float16))


def test_contents_and_raw_contents_never_mix() -> None:
    message = _request(
        _tensor("A", "INT32", [1], int_contents=[1]),
        Tensor(name="B", datatype="INT32", shape=[1]),
        raw_input_contents=[struct.pack("<i", 1)],
    )
    assert _fails(message) == (
        "contents field must not be specified when using raw_input_contents for 'A' for model 'm'"
    )


def test_missing_data_is_named() -> None:
    assert _fails(_request(Tensor(name="A", datatype="INT32", shape=[1]))) == (
        "unable to find data for input tensor 'A' for model 'm' in request."
    )
    message = _request(
        Tensor(name="A", datatype="INT32", shape=[1]),
        Tensor(name="B", datatype="INT32", shape=[1]),
        raw_input_contents=[struct.pack("<i", 1)],
    )
    assert "input tensor 'B'" in _fails(message)


def test_extra_raw_contents_are_refused() -> None:
    message = _request(Tensor(name="A", datatype="INT32", shape=[1]), raw_input_contents=[b"\0" * 4] * 2)
    assert "unexpected additional input data for model 'm'" in _fails(message)


def test_contents_field_must_match_the_datatype() -> None:
    assert _fails(_request(_tensor("A", "INT32", [1], fp32_contents=[1.0]))) == (
        "unexpected explicit tensor data for input tensor 'A' for model 'm' of type 'FP32', expected datatype "
        "'INT32'"
    )
    assert "of type 'FP32', expected datatype 'FP16'" in _fails(
        _request(_tensor("A", "FP16", [1], fp32_contents=[1]))
    )
    assert "expected datatype '<invalid>'" in _fails(_request(_tensor("A", "FOO", [1], int_contents=[1])))


def test_element_count_must_fill_the_shape() -> None:
    assert _fails(_request(_tensor("A", "INT32", [1, 4], int_contents=[1, 2, 3]), id="x")) == (
        "[request id: x] input byte size mismatch for input 'A' for model 'm'. Expected 16, got 12"
    )
    raw = _request(Tensor(name="A", datatype="INT32", shape=[1, 4]), raw_input_contents=[b"\0" * 12])
    assert "Expected 16, got 12" in _fails(raw)
    assert "expected 3 string elements for inference input 'S' for model 'm', got 2" in _fails(
        _request(_tensor("S", "BYTES", [3], bytes_contents=[b"a", b"b"]))
    )
    assert (
        "unexpected number of string elements 2 for inference input 'S' for model 'm', expecting 1"
        in _fails(_request(_tensor("S", "BYTES", [1], bytes_contents=[b"a", b"b"])))
    )


def test_values_out_of_range_for_narrow_integers_are_refused() -> None:
    assert "out of range for INT8" in _fails(_request(_tensor("A", "INT8", [1], int_contents=[200])))
    assert "out of range for UINT16" in _fails(_request(_tensor("A", "UINT16", [1], uint_contents=[70000])))


def test_negative_and_huge_shapes_are_refused() -> None:
    assert "cannot be negative" in _fails(_request(_tensor("A", "INT32", [1, -4], int_contents=[1])))
    huge = _request(Tensor(name="A", datatype="INT32", shape=[2**30, 2**30]), raw_input_contents=[b""])
    assert "cannot be served" in _fails(huge)


def test_request_parameters_as_triton_takes_them() -> None:
    tensor = _tensor("A", "INT32", [1], int_contents=[1])
    params = {
        "s": pb.InferParameter(string_param="x"),
        "i": pb.InferParameter(int64_param=-3),
        "b": pb.InferParameter(bool_param=True),
        "d": pb.InferParameter(double_param=0.25),
        "priority": pb.InferParameter(uint64_param=2),
        "triton_enable_empty_final_response": pb.InferParameter(bool_param=True),
    }
    request = decode_infer_request(_request(tensor, parameters=params))
    assert request.parameters == {
        "s": "x",
        "i": -3,
        "b": True,
        "d": 0.25,
        "triton_enable_empty_final_response": True,
    }
    assert request.priority == 2  # a request control, not a parameter the model sees
    assert _fails(_request(tensor, parameters={"u": pb.InferParameter(uint64_param=1)})) == (
        "invalid value type for 'u' parameter, expected int64_param, bool_param, or string_param."
    )
    assert "expected int64_param, bool_param" in _fails(
        _request(tensor, parameters={"e": pb.InferParameter()})
    )
    assert _fails(_request(tensor, parameters={"triton_x": pb.InferParameter(bool_param=True)})).startswith(
        "parameter keys starting with 'triton_' are reserved for Triton usage."
    )
    assert "'timeout'" in _fails(
        _request(tensor, parameters={"timeout": pb.InferParameter(string_param="1")})
    )


def test_requested_outputs_and_classification() -> None:
    tensor = _tensor("A", "INT32", [1], int_contents=[1])
    classify = Output(name="OUT", parameters={"classification": pb.InferParameter(int64_param=3)})
    request = decode_infer_request(_request(tensor, outputs=[classify, Output(name="OTHER")]))
    assert request.outputs is not None
    assert [(o.name, o.class_count) for o in request.outputs] == [("OUT", 3), ("OTHER", 0)]
    wrong = Output(name="OUT", parameters={"classification": pb.InferParameter(string_param="3")})
    assert _fails(_request(tensor, outputs=[wrong])) == (
        "invalid value type for 'classification' parameter, expected int64_param"
    )
    shm = Output(name="OUT", parameters={"shared_memory_region": pb.InferParameter(string_param="r")})
    assert _fails(_request(tensor, outputs=[shm])) == (
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'OUT'"
    )
    shm.parameters["shared_memory_byte_size"].int64_param = 64
    shm.parameters["shared_memory_offset"].int64_param = 8
    (_, requested) = decode_infer_request(_request(tensor, outputs=[classify, shm])).outputs or []
    assert requested.shared_memory == SharedMemoryRef("r", 8, 64)


def test_shared_memory_inputs_take_no_raw_contents() -> None:
    in_shm = Tensor(name="A", datatype="INT32", shape=[1, 4])
    in_shm.parameters["shared_memory_region"].string_param = "r"
    in_shm.parameters["shared_memory_byte_size"].int64_param = 16
    message = _request(
        in_shm, Tensor(name="B", datatype="INT32", shape=[1, 4]), raw_input_contents=[b"\0" * 16]
    )
    a, b = decode_infer_request(message).inputs
    assert (
        a.shared_memory == SharedMemoryRef("r", 0, 16) and b.shared_memory is None and b.data.shape == (1, 4)
    )
    in_shm.contents.int_contents.extend([1, 2, 3, 4])
    assert "must not be specified when using shared memory for 'A'" in _fails(_request(in_shm))


def test_shared_memory_outputs_keep_their_place_empty() -> None:
    data = np.zeros((1, 2), dtype=np.int32)
    in_region = InferTensor("A", "INT32", (1, 2), data, {}, SharedMemoryRef("r", 0, 8))
    response = InferResponse("m", "1", [in_region, InferTensor("B", "INT32", (1, 2), data)])
    assert list(encode_infer_response(response).raw_output_contents) == [b"", b"\0" * 8]


def test_response_always_in_raw_output_contents() -> None:
    strings = np.array([b"ab", b""], dtype=np.object_)
    response = InferResponse(
        "m",
        "3",
        [
            InferTensor("N", "INT16", (1, 2), np.array([[1, -1]], dtype=np.int16)),
            InferTensor("S", "BYTES", (2,), strings),
        ],
        id="q",
        parameters={"flag": True, "n": 7, "x": 0.5, "t": "v"},
    )
    message = encode_infer_response(response)
    assert (message.model_name, message.model_version, message.id) == ("m", "3", "q")
    assert [(o.name, o.datatype, list(o.shape)) for o in message.outputs] == [
        ("N", "INT16", [1, 2]),
        ("S", "BYTES", [2]),
    ]
    assert list(message.raw_output_contents) == [struct.pack("<2h", 1, -1), b"\2\0\0\0ab\0\0\0\0"]
    assert not any(o.HasField("contents") for o in message.outputs)
    kinds = {k: v.WhichOneof("parameter_choice") for k, v in message.parameters.items()}
    assert kinds == {"flag": "bool_param", "n": "int64_param", "x": "double_param", "t": "string_param"}
