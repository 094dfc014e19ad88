"""Requests decoded from the layout of earlier ones read exactly as the general decoder reads them, errors
included, however their bytes are laid out; responses written from the head of earlier ones are the bytes
protobuf writes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.errors import InvalidArgument, NereidError
from nereid.frontends.grpc.codec import decode_infer_request, encode_infer_response
from nereid.frontends.grpc.layouts import MAX_LAYOUTS, LayoutCache, ResponseLayouts
from nereid.frontends.grpc.servicer import InferenceServicer
from nereid.shared_memory import SharedMemoryRef
from nereid.types import InferRequest, InferResponse, InferTensor


def _message(values: list[float], **changes: Any) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="add_sub", model_version=changes.pop("version", ""))
    message.id = changes.pop("id", "")
    shape = changes.pop("shape", [1, len(values)])
    datatype = changes.pop("datatype", "FP32")
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype=datatype, shape=shape)
        message.raw_input_contents.append(np.asarray(values, dtype=np.float32).tobytes())
    for name in changes.pop("outputs", ("OUTPUT0", "OUTPUT1")):
        message.outputs.add(name=name)
    assert not changes
    return message


def _read(request: InferRequest) -> tuple[Any, ...]:
    """Everything a request carries, arrays as (dtype, shape, bytes)."""
    inputs = [
        (
            t.name,
            t.datatype,
            t.shape,
            t.data.dtype.str,
            t.data.shape,
            t.data.tobytes(),
            t.parameters,
            t.shared_memory,
        )
        for t in request.inputs
    ]
    fields = (
        "model_name",
        "model_version",
        "outputs",
        "id",
        "parameters",
        "sequence_id",
        "flags",
        "priority",
    )
    return (inputs, *(getattr(request, f) for f in (*fields, "timeout_us")))


def _outcome(decode: Any, *args: Any) -> Any:
    try:
        return _read(decode(*args))
    except NereidError as exc:
        return (type(exc), exc.message)


def _same(cache: LayoutCache, message: pb.ModelInferRequest, payload: bytes | None = None) -> Any:
    payload = message.SerializeToString() if payload is None else payload
    parsed = pb.ModelInferRequest.FromString(payload)
    expected = _outcome(decode_infer_request, parsed)
    known = cache.known(payload)  # from its bytes alone, where laid out as a layout already learned
    if known is not None:
        assert _read(known) == expected
    assert _outcome(cache.decode, parsed, payload) == expected
    return expected


def _plain_parameters(message: pb.ModelInferRequest) -> pb.ModelInferRequest:
    """perf_analyzer's parameter, and one of each plain kind."""
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    message.parameters["name"].string_param = "x"
    message.parameters["count"].int64_param = -3
    message.parameters["scale"].double_param = 0.5
    return message


def _variants() -> list[pb.ModelInferRequest]:
    plain = _message([1.0, 2.0])
    with_parameters = _message([1.0])
    with_parameters.parameters["sequence_id"].int64_param = 7
    plain_parameters = _plain_parameters(_message([1.0, 2.0]))
    mixed_parameters = _plain_parameters(_message([1.0]))
    mixed_parameters.parameters["priority"].int64_param = 2
    reserved_key = _message([1.0])
    reserved_key.parameters["triton_other"].bool_param = True
    bad_kind = _message([1.0])
    bad_kind.parameters["scale"].uint64_param = 3
    tensor_parameters = _message([1.0])
    tensor_parameters.inputs[0].parameters["x"].string_param = "y"
    classified = _message([1.0])
    classified.outputs[0].parameters["classification"].int64_param = 1
    short = _message([1.0, 2.0])
    short.raw_input_contents[1] = b"\0" * 4
    extra = _message([1.0])
    extra.raw_input_contents.append(b"\0" * 4)
    missing = _message([1.0])
    del missing.raw_input_contents[1]
    typed = _message([])
    del typed.raw_input_contents[:]
    for tensor in typed.inputs:
        tensor.contents.fp32_contents.append(1.0)
    large = _message([0.5] * 40000)  # raw contents with two-byte and three-byte lengths
    return [
        plain,
        _message([3.0], id="request-1", version="1"),
        _message([1.0], outputs=()),
        _message([1.0] * 4, shape=[2, 2]),
        _message([1.0], shape=[1, -1]),
        _message([1.0], datatype="BYTES"),
        _message([1.0], datatype="NOPE"),
        _message([1.0, 2.0], datatype="FP16"),
        large,
        with_parameters,
        plain_parameters,
        mixed_parameters,
        reserved_key,
        bad_kind,
        tensor_parameters,
        classified,
        short,
        extra,
        missing,
        typed,
    ]


@pytest.mark.parametrize("index", range(len(_variants())))
def test_each_request_reads_as_the_general_decoder_reads_it_first_and_again(index: int) -> None:
    cache = LayoutCache()
    message = _variants()[index]
    _same(cache, message)  # learns the layout
    _same(cache, message)  # uses it
    again = pb.ModelInferRequest()
    again.CopyFrom(message)
    if again.raw_input_contents:
        again.raw_input_contents[0] = bytes(reversed(again.raw_input_contents[0]))
    _same(cache, again)


def test_a_request_shaped_like_an_earlier_one_but_not_sized_like_it_is_refused_in_the_same_words() -> None:
    cache = LayoutCache()
    _same(cache, _message([1.0, 2.0]))
    short = _message([1.0, 2.0])
    short.raw_input_contents[0] = b"\0" * 12
    outcome = _same(cache, short)  # an error, worded by the general decoder
    assert isinstance(outcome[1], str) and "byte size mismatch" in outcome[1]
    more = _message([1.0, 2.0])
    more.raw_input_contents.append(b"\0" * 8)
    _same(cache, more)


def test_a_request_laid_out_as_an_earlier_one_is_decoded_from_its_bytes_alone() -> None:
    """Its size, the bytes before its raw contents and its raw contents' fields say it is an earlier one's
    layout: no protobuf parse. Any of them otherwise, and the parsed message is decoded."""
    cache = LayoutCache()
    first = _message([1.0, 2.0]).SerializeToString()
    assert cache.known(first) is None  # no layout learned yet
    _same(cache, _message([1.0, 2.0]))
    payload = _message([3.0, 4.0]).SerializeToString()
    known = cache.known(payload)
    assert known is not None
    assert [t.data.tolist() for t in known.inputs] == [[[3.0, 4.0]], [[3.0, 4.0]]]
    assert known.inputs[0].data.flags.aligned and not known.inputs[0].data.flags.writeable
    other = _message([3.0, 4.0])
    other.model_name = "add_suc"  # as long, but other bytes before the raw contents
    assert cache.known(other.SerializeToString()) is None
    # as many bytes of raw contents in all, but not one input's each: the general decoder words it
    prefix = payload[: len(payload) - 2 * (2 + 8)]
    uneven = prefix + b"\x3a\x04" + b"\0" * 4 + b"\x3a\x0c" + b"\0" * 12
    assert len(uneven) == len(payload) and cache.known(uneven) is None
    outcome = _same(cache, _message([1.0, 2.0]), uneven)
    assert isinstance(outcome[1], str) and "byte size mismatch" in outcome[1]


def test_layouts_of_one_size_each_decode_their_own_requests_whichever_came_last() -> None:
    """Two layouts whose requests have one size, with raw contents of other sizes (a longer id makes up
    for smaller inputs): each request reads as the general decoder reads it, in any order."""
    big = _message([1.0, 2.0])
    size = len(big.SerializeToString())
    small = next(
        m for n in range(1, 40) if len((m := _message([1.0], id="x" * n)).SerializeToString()) == size
    )
    cache = LayoutCache()
    for message in (big, small):
        _same(cache, message)  # learnt from their parse
    for message in (big, small, big, big, small, small, big):
        payload = message.SerializeToString()
        assert len(payload) == size
        _same(cache, message, payload)
        _same(cache, message, payload[:-1] + b"\x01")  # other data, the same layout


def test_raw_contents_written_before_other_fields_are_read_right() -> None:
    """A serializer may write fields in any order: a raw content first, then the rest."""
    cache = LayoutCache()
    message = _message([1.0, 2.0])
    head = pb.ModelInferRequest()
    head.raw_input_contents.append(message.raw_input_contents[0])
    rest = pb.ModelInferRequest()
    rest.CopyFrom(message)
    del rest.raw_input_contents[0]
    payload = head.SerializeToString() + rest.SerializeToString()
    _same(cache, message)
    decoded = _same(cache, message, payload)
    assert isinstance(decoded, tuple) and len(decoded[0]) == 2
    # and a layout learned from such bytes serves the ordinary ones too
    fresh = LayoutCache()
    _same(fresh, message, payload)
    _same(fresh, message)


def test_requests_with_plain_parameters_are_decoded_from_their_layout_each_with_its_own_parameters() -> None:
    cache = LayoutCache()
    message = _plain_parameters(_message([1.0, 2.0]))
    payload = message.SerializeToString()
    first = cache.decode(message, payload)
    second = cache.decode(message, payload)
    assert first.layout is not None and second.layout is first.layout
    assert first.parameters == {
        "triton_enable_empty_final_response": True,
        "name": "x",
        "count": -3,
        "scale": 0.5,
    }
    first.parameters["name"] = "changed"  # a backend may change its request's parameters
    assert second.parameters["name"] == "x"
    assert cache.decode(message, payload).parameters["name"] == "x"


def test_requests_of_one_layout_each_have_their_own_list_of_the_outputs_asked_for() -> None:
    cache = LayoutCache()
    message = _message([1.0, 2.0])
    payload = message.SerializeToString()
    first = cache.decode(message, payload)
    second = cache.known(payload)
    assert second is not None and second.layout is first.layout
    assert first.outputs == second.outputs == decode_infer_request(message).outputs
    assert first.outputs is not second.outputs
    first.outputs.pop()
    assert second.outputs is not None and len(second.outputs) == 2


def test_requests_with_controls_take_the_general_decoder() -> None:
    cache = LayoutCache()
    message = _plain_parameters(_message([1.0]))
    message.parameters["sequence_id"].int64_param = 7
    payload = message.SerializeToString()
    for _ in range(2):
        request = cache.decode(message, payload)
        assert request.layout is None and request.sequence_id == 7


def test_the_table_of_layouts_is_bounded() -> None:
    cache = LayoutCache()
    for i in range(MAX_LAYOUTS + 10):
        _same(cache, _message([1.0], id=f"request-{i}"))
    assert len(cache._layouts) <= MAX_LAYOUTS


def _responses() -> list[InferResponse]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    words = np.array([b"one", b"", b"three"], dtype=np.object_)
    large = np.zeros((1, 40000), dtype=np.float32)  # raw contents with a three-byte length
    region = SharedMemoryRef("region", 0, 64)
    return [
        InferResponse(
            "add_sub",
            "1",
            [InferTensor("OUTPUT0", "FP32", (1, 16), a), InferTensor("OUTPUT1", "FP32", (1, 16), a)],
        ),
        InferResponse("add_sub", "1", [InferTensor("OUTPUT0", "FP32", (1, 16), a)], "request-7"),
        InferResponse(
            "m",
            "",
            [InferTensor("WORDS", "BYTES", (3,), words), InferTensor("BIG", "FP32", (1, 40000), large)],
        ),
        InferResponse("m", "2", [InferTensor("EMPTY", "INT32", (0, 4), np.zeros((0, 4), np.int32))]),
        InferResponse("m", "2", []),
        InferResponse("m", "2", [InferTensor("OUT", "FP32", (1, 16), a)], "", {"sequence_id": 3}),
        InferResponse("m", "2", [InferTensor("OUT", "FP32", (1, 16), a, {}, region)]),
        InferResponse(  # one output in a region, one in the response
            "m",
            "2",
            [
                InferTensor("IN_REGION", "FP32", (1, 16), a, {}, region),
                InferTensor("OUT", "FP32", (1, 16), a),
            ],
        ),
    ]


@pytest.mark.parametrize("index", range(len(_responses())))
def test_responses_are_written_as_protobuf_writes_them_first_and_again(index: int) -> None:
    layouts = ResponseLayouts()
    response = _responses()[index]
    expected = encode_infer_response(response).SerializeToString()
    assert layouts.serialize(response) == expected  # learns the head
    assert layouts.serialize(response) == expected  # uses it
    if response.outputs and response.outputs[0].datatype == "FP32":
        response.outputs[0].data = response.outputs[0].data + 1  # new data, the same head
        assert layouts.serialize(response) == encode_infer_response(response).SerializeToString()


def _data_like_the_first(response: InferResponse) -> list[Any]:
    """Data for the first output that keeps the head the same but not the way its bytes are found: other
    numpy types, arrays not laid out in row-major order, another size."""
    tensor = response.outputs[0]
    if tensor.datatype == "BYTES":
        return [np.array([b"a much longer word", b"", b"x"], dtype=np.object_)]
    array = tensor.data
    return [
        array.astype(array.dtype.newbyteorder(">")),  # the same values, big-endian
        np.asfortranarray(array.reshape(array.shape[::-1]).T) if array.ndim == 2 else array[::-1],
        array.astype(np.float64),  # converted to the wire's type, as the general encoder does
        array.view(np.ndarray)[..., ::1],
    ]


@pytest.mark.parametrize("index", [0, 2, 3])
def test_a_known_head_with_other_data_writes_what_protobuf_writes(index: int) -> None:
    layouts = ResponseLayouts()
    response = _responses()[index]
    layouts.serialize(response)  # learns the head
    for data in _data_like_the_first(response):
        response.outputs[0].data = data
        assert layouts.serialize(response) == encode_infer_response(response).SerializeToString()


def _answers(answer: Any, request: InferRequest, result: Any) -> Any:
    try:
        return answer(request, result)
    except NereidError as exc:
        return (type(exc), exc.message)


def test_a_serialized_answer_is_the_answer_serialized_errors_included() -> None:
    servicer = InferenceServicer(SimpleNamespace(tracer=SimpleNamespace(active=False)))  # type: ignore[arg-type]
    request = decode_infer_request(_message([1.0]))
    unconvertible = InferTensor("OUT", "FP32", (1,), np.array(["not a number"], dtype=np.object_))
    results = [
        *_responses(),
        InferResponse("m", "1", [unconvertible]),
        InvalidArgument("refused"),
        RuntimeError("broken"),
    ]
    for result in results:
        expected = _answers(servicer.respond, request, result)
        if isinstance(expected, pb.ModelInferResponse):
            expected = expected.SerializeToString()
        assert _answers(servicer.respond_serialized, request, result) == expected
