"""--grpc-restricted-protocol: restricted RPC groups need their metadata; the others are untouched."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.settings import RestrictedApi, ServerSettings
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import served_stub

RULE = RestrictedApi(frozenset({"model-repository", "inference"}), "admin-key", "s3cret")
GOOD = (("triton-grpc-protocol-admin-key", "s3cret"),)
REFUSAL = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"


@pytest.fixture(scope="module")
def stub() -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    settings = ServerSettings(
        model_repositories=(EXAMPLES,),
        grpc_address="127.0.0.1",
        grpc_port=0,
        grpc_restricted_protocol=(RULE,),
    )
    with served_stub(settings) as stub:
        yield stub


def _infer_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16]).contents.int_contents.extend([1] * 16)
    return request


@pytest.mark.parametrize(
    "metadata", [(), (("triton-grpc-protocol-admin-key", "wrong"),), (("admin-key", "s3cret"),)]
)
def test_restricted_groups_refuse_without_the_header(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, metadata: tuple[tuple[str, str], ...]
) -> None:
    for call in (
        lambda: stub.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=metadata),
        lambda: stub.ModelInfer(_infer_request(), metadata=metadata),
        lambda: list(stub.ModelStreamInfer(iter([_infer_request()]), metadata=metadata)),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and info.value.details() == REFUSAL


def test_the_header_opens_them_and_other_groups_stay_open(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    assert stub.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=GOOD).models
    assert stub.ModelInfer(_infer_request(), metadata=GOOD).outputs
    (answer,) = list(stub.ModelStreamInfer(iter([_infer_request()]), metadata=GOOD))
    assert not answer.error_message
    assert stub.ServerMetadata(pb.ServerMetadataRequest()).name == "triton"
    assert stub.ModelReady(pb.ModelReadyRequest(name="simple")).ready
