"""Every RPC of GRPCInferenceService against the in-process server: answers, status codes, messages."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.datatypes import deserialize_bytes
from tests.frontends.grpc.conftest import InProcessServer

Tensor = pb.ModelInferRequest.InferInputTensor


def _simple_request(**fields: object) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="simple",
        inputs=[
            Tensor(name="INPUT0", datatype="INT32", shape=[1, 16]),
            Tensor(name="INPUT1", datatype="INT32", shape=[1, 16]),
        ],
        raw_input_contents=[np.arange(16, dtype="<i4").tobytes(), np.ones(16, dtype="<i4").tobytes()],
        **fields,
    )


def _error(call: object) -> grpc.RpcError:
    assert isinstance(call, grpc.RpcError)
    return call


def test_health_and_server_metadata(grpc_server: InProcessServer) -> None:
    stub = grpc_server.stub
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    metadata = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert metadata.name == "triton" and metadata.version
    assert list(metadata.extensions) == list(grpc_server.engine.server_metadata().extensions)
    # grpc.health.v1.Health/Check, read on the wire: field 1 (status) = 1 (SERVING)
    check = grpc_server.channel.unary_unary("/grpc.health.v1.Health/Check")
    assert check(b"") == b"\x08\x01"
    assert check(b"\x0a\x1einference.GRPCInferenceService") == b"\x08\x01"
    with pytest.raises(grpc.RpcError) as info:
        grpc_server.channel.unary_stream("/grpc.health.v1.Health/Watch")(b"").next()
    assert _error(info.value).code() == grpc.StatusCode.UNIMPLEMENTED


def test_model_metadata_readiness_and_config(grpc_server: InProcessServer) -> None:
    stub = grpc_server.stub
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="simple"))
    assert (metadata.name, list(metadata.versions), metadata.platform) == (
        "simple",
        ["1"],
        "onnxruntime_onnx",
    )
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert stub.ModelReady(pb.ModelReadyRequest(name="simple", version="1")).ready
    assert not stub.ModelReady(pb.ModelReadyRequest(name="simple", version="2")).ready
    assert not stub.ModelReady(pb.ModelReadyRequest(name="nope")).ready
    config = stub.ModelConfig(pb.ModelConfigRequest(name="simple_classifier")).config
    assert config == grpc_server.engine.model_config_message("simple_classifier")
    assert config.max_batch_size == 8 and config.output[0].label_filename == "labels.txt"


@pytest.mark.parametrize(
    ("rpc", "request_message", "code", "message"),
    [
        (
            "ModelMetadata",
            pb.ModelMetadataRequest(name="nope"),
            "NOT_FOUND",
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "ModelConfig",
            pb.ModelConfigRequest(name="simple", version="2"),
            "NOT_FOUND",
            "Request for unknown model: 'simple' version 2 is not found",
        ),
        (
            "ModelReady",
            pb.ModelReadyRequest(name="simple", version="abc"),
            "INVALID_ARGUMENT",
            "failed to get model version from specified version string 'abc' (details: stol), version should be "
            "an integral value > 0",
        ),
        (
            "RepositoryIndex",
            pb.RepositoryIndexRequest(repository_name="other"),
            "UNIMPLEMENTED",
            "'repository_name' specification is not supported",
        ),
        (
            "RepositoryModelLoad",
            pb.RepositoryModelLoadRequest(model_name="simple"),
            "UNAVAILABLE",
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (
            "RepositoryModelUnload",
            pb.RepositoryModelUnloadRequest(model_name="simple"),
            "UNAVAILABLE",
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (
            "SystemSharedMemoryStatus",
            pb.SystemSharedMemoryStatusRequest(name="nope"),
            "NOT_FOUND",
            "Unable to find system shared memory region: 'nope'",
        ),
    ],
)
def test_errors_carry_triton_codes_and_texts(
    grpc_server: InProcessServer, rpc: str, request_message: object, code: str, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        getattr(grpc_server.stub, rpc)(request_message)
    error = _error(info.value)
    assert error.code() == getattr(grpc.StatusCode, code)
    assert error.details() == message


def test_repository_index(grpc_server: InProcessServer) -> None:
    index = grpc_server.stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
    assert [(m.name, m.version, m.state) for m in index.models] == [
        ("simple", "1", "READY"),
        ("simple_classifier", "1", "READY"),
        ("simple_int8", "1", "READY"),
        ("simple_string", "1", "READY"),
    ]


def test_trace_setting(grpc_server: InProcessServer) -> None:
    """Read, update, then refuse an unknown model, on either gRPC core."""
    answer = grpc_server.stub.TraceSetting(pb.TraceSettingRequest(model_name="simple"))
    assert list(answer.settings["trace_level"].value) == ["OFF"]
    request = pb.TraceSettingRequest(model_name="simple")
    request.settings["trace_rate"].value.append("7")
    answer = grpc_server.stub.TraceSetting(request)
    assert list(answer.settings["trace_rate"].value) == ["7"]
    assert list(grpc_server.stub.TraceSetting(pb.TraceSettingRequest()).settings["trace_rate"].value) == [
        "1000"
    ]
    with pytest.raises(grpc.RpcError) as info:
        grpc_server.stub.TraceSetting(pb.TraceSettingRequest(model_name="nope"))
    assert _error(info.value).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _error(info.value).details() == "Request for unknown model : nope"


def test_infer_raw_and_typed_give_the_same_answer(grpc_server: InProcessServer) -> None:
    raw = grpc_server.stub.ModelInfer(_simple_request(id="r"))
    typed_request = pb.ModelInferRequest(model_name="simple", model_version="1", id="r")
    for name, values in (("INPUT0", range(16)), ("INPUT1", [1] * 16)):
        tensor = typed_request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(values)
    typed = grpc_server.stub.ModelInfer(typed_request)
    assert raw == typed
    assert (raw.model_name, raw.model_version, raw.id) == ("simple", "1", "r")
    assert [o.name for o in raw.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(np.frombuffer(raw.raw_output_contents[0], "<i4"), np.arange(1, 17))
    np.testing.assert_array_equal(np.frombuffer(raw.raw_output_contents[1], "<i4"), np.arange(-1, 15))


def test_infer_classification_with_labels(grpc_server: InProcessServer) -> None:
    request = pb.ModelInferRequest(model_name="simple_classifier")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([0.1, 0.7, 0.2, 0.5])
    output = request.outputs.add(name="OUTPUT0")
    output.parameters["classification"].int64_param = 2
    response = grpc_server.stub.ModelInfer(request)
    assert [(o.datatype, list(o.shape)) for o in response.outputs] == [("BYTES", [1, 2])]
    classes = deserialize_bytes(response.raw_output_contents[0], 2, "OUTPUT0")
    # the highest two of the four inputs are at indices 1 and 3, with their labels
    assert [c.split(b":")[1:] for c in classes] == [[b"1", b"dog"], [b"3", b"fish"]]


def test_infer_errors_map_to_grpc_codes(grpc_server: InProcessServer) -> None:
    with pytest.raises(grpc.RpcError) as info:
        grpc_server.stub.ModelInfer(_simple_request(model_version="7"))
    assert _error(info.value).code() == grpc.StatusCode.NOT_FOUND
    bad = _simple_request(id="q")
    bad.inputs[1].datatype = "FP32"
    with pytest.raises(grpc.RpcError) as info:
        grpc_server.stub.ModelInfer(bad)
    error = _error(info.value)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "[request id: q] inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'"
    )


def test_messages_above_grpc_default_limit_are_read(grpc_server: InProcessServer) -> None:
    # 5 MiB is over grpc's 4 MiB default: the server reads it and answers about its content
    request = _simple_request()
    request.raw_input_contents[0] = b"\0" * (5 << 20)
    with pytest.raises(grpc.RpcError) as info:
        grpc_server.stub.ModelInfer(request)
    error = _error(info.value)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"Expected 64, got {5 << 20}" in error.details()


def test_compressed_requests_are_accepted(grpc_server: InProcessServer) -> None:
    plain = grpc_server.stub.ModelInfer(_simple_request())
    assert grpc_server.stub.ModelInfer(_simple_request(), compression=grpc.Compression.Gzip) == plain
    if grpc_server.core == "aio":
        assert grpc_server.stub.ModelInfer(_simple_request(), compression=grpc.Compression.Deflate) == plain
        return
    # The native core refuses deflate with a clear status (README).
    with pytest.raises(grpc.RpcError) as caught:
        grpc_server.stub.ModelInfer(_simple_request(), compression=grpc.Compression.Deflate)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED and "deflate" in caught.value.details()


def test_log_settings_read_and_change(grpc_server: InProcessServer) -> None:
    settings = grpc_server.stub.LogSettings(pb.LogSettingsRequest()).settings
    assert (
        settings["log_verbose_level"].uint32_param == 0 and settings["log_format"].string_param == "default"
    )
    change = pb.LogSettingsRequest()
    change.settings["log_warning"].bool_param = False
    try:
        changed = grpc_server.stub.LogSettings(change).settings
        assert not changed["log_warning"].bool_param and changed["log_info"].bool_param
        wrong = pb.LogSettingsRequest()
        wrong.settings["log_info"].string_param = "false"
        with pytest.raises(grpc.RpcError) as info:
            grpc_server.stub.LogSettings(wrong)
        assert _error(info.value).code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _error(info.value).details() == "expect boolean for 'log_info'"
    finally:
        change.settings["log_warning"].bool_param = True
        grpc_server.stub.LogSettings(change)
