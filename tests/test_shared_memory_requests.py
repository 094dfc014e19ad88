"""Requests whose tensors are all in shared memory are decoded once per message, over HTTP and gRPC: later
ones are fresh copies of the first, equal to what the general decoder gives."""

from __future__ import annotations

import orjson
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.frontends.grpc.codec import decode_infer_request as decode_grpc
from nereid.frontends.grpc.layouts import LayoutCache
from nereid.frontends.http import codec as http_codec
from nereid.frontends.http.codec import _decode
from nereid.frontends.http.codec import decode_infer_request as decode_http
from nereid.shared_memory_requests import MAX_MESSAGE, SharedMemoryRequests
from nereid.types import InferRequest


def _body(**request: object) -> bytes:
    document = {
        "inputs": [
            {
                "name": f"INPUT{i}",
                "datatype": "FP32",
                "shape": [1, 16],
                "parameters": {"shared_memory_region": f"in{i}", "shared_memory_byte_size": 64},
            }
            for i in range(2)
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 64}}
        ],
        **request,
    }
    return orjson.dumps(document)


def _fields(request: InferRequest) -> tuple[object, ...]:
    inputs = [
        (t.name, t.datatype, t.shape, t.data.size, t.parameters, t.shared_memory) for t in request.inputs
    ]
    return (
        request.model_name,
        request.model_version,
        inputs,
        request.outputs,
        request.id,
        request.parameters,
    )


def test_a_json_body_in_shared_memory_decodes_once_into_fresh_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _body(id="r1", parameters={"binary_data_output": False})
    first = decode_http(body, None, "add_sub", "")
    first.parameters["forwarded"] = "x"  # what a frontend does to the request it got
    first.inputs[0].data = b"read from the region"
    second = decode_http(body, None, "add_sub", "")
    assert _fields(second) == _fields(_decode(body, None, "add_sub", ""))  # as the general decoder gives it
    assert second.inputs[0] is not first.inputs[0] and second.outputs[0] is not first.outputs[0]
    assert second.parameters == {"binary_data_output": False}
    # the same body to another model is that model's request
    assert decode_http(body, None, "other", "2").model_name == "other"
    # as perf_analyzer sends it: an inference header as long as the body; not parsed again
    monkeypatch.setattr(http_codec, "_decode", None)
    third = decode_http(body, len(body), "add_sub", "")
    assert _fields(third) == _fields(second) and third.inputs[0] is not second.inputs[0]


def test_only_plain_requests_in_shared_memory_are_kept() -> None:
    cache = SharedMemoryRequests()
    plain = _body()
    cache.learn(_decode(plain, None, "m", ""), plain, "m", "")
    assert cache.get(plain, "m", "") is not None and cache.get(plain, "n", "") is None
    with_data = orjson.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]})
    controlled = _body(parameters={"sequence_id": 7, "sequence_start": True})
    for body in (with_data, controlled):
        cache.learn(_decode(body, None, "m", ""), body, "m", "")
        assert cache.get(body, "m", "") is None
    large = _body(id="x" * MAX_MESSAGE)
    cache.learn(_decode(large, None, "m", ""), large, "m", "")
    assert cache.get(large, "m", "") is None


def test_a_grpc_message_in_shared_memory_decodes_once() -> None:
    message = pb.ModelInferRequest(model_name="add_sub", id="r")
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    tensor.parameters["shared_memory_region"].string_param = "in0"
    tensor.parameters["shared_memory_byte_size"].int64_param = 64
    output = message.outputs.add(name="OUTPUT0")
    output.parameters["shared_memory_region"].string_param = "out"
    output.parameters["shared_memory_byte_size"].int64_param = 64
    message.parameters["triton_enable_empty_final_response"].bool_param = False
    payload = message.SerializeToString()
    layouts = LayoutCache()
    assert layouts.known(payload) is None  # not seen yet
    first = layouts.decode(message, payload)
    again = layouts.known(payload)
    assert again is not None and again is not first
    assert _fields(again) == _fields(first) == _fields(decode_grpc(message))
    assert again.inputs[0].shared_memory is not None and again.inputs[0].shared_memory.region == "in0"
