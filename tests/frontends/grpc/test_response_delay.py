"""TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC: non-inference RPCs answer late, inference on time."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.frontends.grpc.servicer import RESPONSE_DELAY_ENV, response_delay_s
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import CORES, served_stub


@pytest.mark.parametrize(("value", "seconds"), [("2", 2), ("", 0), ("x", 0), ("-3", 0)])
def test_the_hook_reads_whole_seconds(monkeypatch: pytest.MonkeyPatch, value: str, seconds: int) -> None:
    monkeypatch.setenv(RESPONSE_DELAY_ENV, value)
    assert response_delay_s() == seconds


@pytest.fixture(params=sorted(CORES))
def delayed_stub(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    monkeypatch.setenv(RESPONSE_DELAY_ENV, "1")
    settings = ServerSettings(
        model_repositories=(EXAMPLES,), grpc_address="127.0.0.1", grpc_port=0, grpc=CORES[request.param]
    )
    with served_stub(settings) as stub:
        yield stub


def test_non_inference_answers_wait_past_a_short_deadline(
    delayed_stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    for call in (
        lambda timeout: delayed_stub.ServerLive(pb.ServerLiveRequest(), timeout=timeout),
        lambda timeout: delayed_stub.ModelConfig(pb.ModelConfigRequest(name="simple"), timeout=timeout),
        # an error waits as long as an answer
        lambda timeout: delayed_stub.ModelConfig(pb.ModelConfigRequest(name="nope"), timeout=timeout),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            call(0.2)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert delayed_stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
    with pytest.raises(grpc.RpcError) as raised:
        delayed_stub.ModelConfig(pb.ModelConfigRequest(name="nope"), timeout=30)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_inference_is_not_delayed(delayed_stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor
    request = pb.ModelInferRequest(
        model_name="simple",
        inputs=[
            tensor(name="INPUT0", datatype="INT32", shape=[1, 16]),
            tensor(name="INPUT1", datatype="INT32", shape=[1, 16]),
        ],
        raw_input_contents=[np.arange(16, dtype="<i4").tobytes(), np.ones(16, dtype="<i4").tobytes()],
    )
    delayed_stub.ModelInfer(request, timeout=30)  # the model's first run may take its time
    # a deadline under the hook's second, far over an answer of the simple model
    delayed_stub.ModelInfer(request, timeout=0.9)
