"""ModelStreamInfer in process: order, errors inside the stream, `triton_final_response`, strict mode."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.frontends.grpc.conftest import InProcessServer


def _request(request_id: str, model: str = "simple", inputs: int = 2) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    for index in range(inputs):
        tensor = request.inputs.add(name=f"INPUT{index}", datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(
            [int(request_id[-1])] * 16 if request_id[-1].isdigit() else [0] * 16
        )
    return request


def test_responses_come_in_request_order_with_errors_inside_the_stream(grpc_server: InProcessServer) -> None:
    requests = [
        _request("a1"),
        _request("b", model="nope"),
        _request("c3"),
        _request("d", inputs=1),
        _request("e5"),
    ]
    responses = list(grpc_server.stub.ModelStreamInfer(iter(requests)))
    assert [r.infer_response.id for r in responses] == ["a1", "b", "c3", "d", "e5"]
    assert [r.error_message for r in responses] == [
        "",
        "Request for unknown model: 'nope' is not found",
        "",
        "[request id: d] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but "
        "missing required input(s) ['INPUT1']. Please provide all required input(s).",
        "",
    ]
    for response in responses:
        assert response.infer_response.parameters["triton_final_response"].bool_param is True
    for response, value in zip((responses[0], responses[2], responses[4]), (1, 3, 5), strict=True):
        out = np.frombuffer(response.infer_response.raw_output_contents[0], "<i4")
        np.testing.assert_array_equal(out, np.full(16, 2 * value))


def test_an_empty_stream_ends_cleanly(grpc_server: InProcessServer) -> None:
    assert list(grpc_server.stub.ModelStreamInfer(iter([]))) == []


def test_strict_stream_ends_with_the_first_error_as_status(grpc_server: InProcessServer) -> None:
    call = grpc_server.stub.ModelStreamInfer(
        iter([_request("a1"), _request("b", model="nope"), _request("c3")]),
        metadata=(("triton_grpc_error", "true"),),
    )
    first = next(call)
    assert first.infer_response.id == "a1" and not first.error_message
    with pytest.raises(grpc.RpcError) as info:
        next(call)
    assert isinstance(info.value, grpc.RpcError)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "Request for unknown model: 'nope' is not found"
