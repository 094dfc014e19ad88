"""Client mistakes on gRPC answered with Triton's status and text, and no traceback in the log: messages
that do not parse (unary or in a stream), and string sequence IDs longer than Triton takes."""

from __future__ import annotations

import logging

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.frontends.grpc.conftest import InProcessServer

_NOT_PROTOBUF = b"\xff\xff\xff\xff"  # a field tag with no valid wire type


def test_a_unary_message_that_does_not_parse_is_answered_internal(
    grpc_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    call = grpc_server.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    with caplog.at_level(logging.INFO), pytest.raises(grpc.RpcError) as refused:
        call(_NOT_PROTOBUF, timeout=10)
    assert (refused.value.code(), refused.value.details()) == (
        grpc.StatusCode.INTERNAL,
        "Unable to parse request",
    )
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_a_stream_message_that_does_not_parse_ends_the_stream_internal(
    grpc_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    call = grpc_server.channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
    with caplog.at_level(logging.INFO), pytest.raises(grpc.RpcError) as refused:
        list(call(iter([_NOT_PROTOBUF]), timeout=10))
    assert (refused.value.code(), refused.value.details()) == (
        grpc.StatusCode.INTERNAL,
        "Unable to parse request",
    )
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


@pytest.mark.parametrize("length", [128, 129])
def test_a_string_sequence_id_over_128_bytes_is_unimplemented(
    grpc_server: InProcessServer, length: int
) -> None:
    data = np.arange(16, dtype=np.int32).tobytes()
    request = pb.ModelInferRequest(
        model_name="simple",
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name=name, datatype="INT32", shape=[1, 16])
            for name in ("INPUT0", "INPUT1")
        ],
        raw_input_contents=[data, data],
    )
    request.parameters["sequence_id"].string_param = "s" * length
    if length == 128:  # `simple` has no sequence batcher: the ID is taken and goes unused, as in Triton
        assert grpc_server.stub.ModelInfer(request, timeout=10).outputs
        return
    with pytest.raises(grpc.RpcError) as refused:
        grpc_server.stub.ModelInfer(request, timeout=10)
    assert (refused.value.code(), refused.value.details()) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "string correlation ID cannot be longer than 128 characters",
    )
