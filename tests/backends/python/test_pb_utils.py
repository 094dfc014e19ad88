"""triton_python_backend_utils as model code uses it, exercised in this process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nereid.backends.python.worker import dlpack, pb_utils


def test_tensors() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", array)
    assert tensor.name() == "X" and tensor.shape() == [2, 3] and tensor.is_cpu()
    assert tensor.triton_dtype() == 11 and tensor.as_numpy() is array
    strings = pb_utils.Tensor("S", np.array([b"a", "b"], dtype=np.object_))
    assert strings.triton_dtype() == 13
    assert pb_utils.Tensor("B", np.array([b"ab", b"c"])).triton_dtype() == 13  # np.bytes_ arrays are BYTES
    with pytest.raises(pb_utils.TritonModelException, match="dtype <U1 is not supported"):
        pb_utils.Tensor("U", np.array(["a"]))
    with pytest.raises(pb_utils.TritonModelException, match="numpy array"):
        pb_utils.Tensor("L", [1, 2])  # type: ignore[arg-type]


def test_dlpack_both_ways() -> None:
    tensor = pb_utils.Tensor("X", np.arange(4, dtype=np.int32))
    back = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), [0, 1, 2, 3])
    assert np.from_dlpack(tensor).tolist() == [0, 1, 2, 3]  # __dlpack__ / __dlpack_device__
    with pytest.raises(pb_utils.TritonModelException, match="C-contiguous"):
        pb_utils.Tensor.from_dlpack("Z", np.arange(8).reshape(2, 4)[:, 1])
    with pytest.raises(pb_utils.TritonModelException, match="name cannot be an empty string"):
        pb_utils.Tensor.from_dlpack("", np.arange(2))
    with pytest.raises(pb_utils.TritonModelException, match="__dlpack__ and __dlpack_device__.*got list"):
        pb_utils.Tensor.from_dlpack("L", [1, 2])


def test_a_read_only_input_is_exported_by_dlpack() -> None:
    """Inputs read in place from a request's body are read-only, which an unversioned DLPack capsule
    cannot say: `from_dlpack(input.to_dlpack())`, the usual first line of a torch model, still works."""
    body = np.arange(4, dtype=np.int32).tobytes()
    tensor = pb_utils.Tensor._wrap("IN", "INT32", np.frombuffer(body, dtype=np.int32))
    back = np.from_dlpack(pb_utils.Tensor.from_dlpack("X", tensor.to_dlpack()))
    assert back.tolist() == [0, 1, 2, 3]
    assert np.from_dlpack(tensor).tolist() == [0, 1, 2, 3]
    torch = pytest.importorskip("torch")
    assert torch.utils.dlpack.from_dlpack(tensor.to_dlpack()).tolist() == [0, 1, 2, 3]
    assert torch.from_dlpack(tensor).tolist() == [0, 1, 2, 3]


def test_a_capsules_device_is_read_from_the_capsule() -> None:
    """A bare capsule says where its data lives only inside its DLTensor: a CPU one is read by numpy as
    before, a CUDA one is taken by torch or CuPy (tests/e2e/test_gpu.py)."""
    capsule = np.arange(3, dtype=np.int64).__dlpack__()
    assert dlpack.is_capsule(capsule) and not dlpack.is_capsule(np.arange(3))
    assert dlpack.capsule_device(capsule) == (dlpack.CPU, 0)
    tensor = pb_utils.Tensor.from_dlpack("C", capsule)
    assert tensor.is_cpu() and tensor.as_numpy().tolist() == [0, 1, 2]
    assert dlpack.capsule_device(capsule) is None  # consumed: renamed "used_dltensor" by its reader


def test_type_helpers() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_STRING"] is np.object_
    assert pb_utils.triton_to_numpy_type(1) is np.bool_
    assert pb_utils.triton_to_numpy_type(8) is np.int32 and pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_to_numpy_type(14) is None  # BF16 has no numpy type
    assert pb_utils.numpy_to_triton_type(np.float64) == 12 and pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.str_) is None


def test_bytes_serialization_is_tritons_length_prefixed_format() -> None:
    serialized = pb_utils.serialize_byte_tensor(np.array([b"ab", "c", 7], dtype=np.object_))
    assert serialized is not None and serialized.dtype == np.uint8
    assert serialized.tobytes() == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c\x01\x00\x00\x007"
    assert pb_utils.deserialize_bytes_tensor(serialized.tobytes()).tolist() == [b"ab", b"c", b"7"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) is None


def test_requests_and_responses() -> None:
    x = pb_utils.Tensor("IN", np.zeros(2, np.float32))
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[x], requested_output_names=["OUT"], request_id="r", parameters={"a": 1}
    )
    assert request.request_id() == "r" and request.requested_output_names() == ["OUT"]
    assert json.loads(request.parameters()) == {"a": 1} and request.correlation_id() == 0
    assert pb_utils.get_input_tensor_by_name(request, "IN") is x
    assert pb_utils.get_input_tensor_by_name(request, "NOPE") is None
    with pytest.raises(pb_utils.TritonModelException, match="bool, int or str"):
        pb_utils.InferenceRequest(model_name="m", parameters={"f": 1.5})
    with pytest.raises(pb_utils.TritonModelException, match="needs the server"):
        request.exec()

    out = pb_utils.Tensor("OUT", np.ones(2, np.float32))
    response = pb_utils.InferenceResponse([out], parameters={"k": "v"})
    # a model that is not decoupled may send its one response instead of returning it
    assert pb_utils.sent_responses([request]) is None
    sender = request.get_response_sender()
    sender.send(response)
    with pytest.raises(pb_utils.TritonModelException, match="one response per request"):
        sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="has been closed"):
        sender.send(response)
    assert pb_utils.sent_responses([request]) == [response]
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert not response.has_error() and json.loads(response.parameters()) == {"k": "v"}
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("no", pb_utils.TritonError.NOT_FOUND))
    assert failed.has_error() and failed.error().code() == 2 and failed.error().message() == "no"  # type: ignore[union-attr]
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    with pytest.raises(pb_utils.TritonModelException, match="list of Tensor"):
        pb_utils.InferenceResponse("x")  # type: ignore[arg-type]


def test_a_requests_input_is_found_on_stand_ins_for_requests_and_tensors() -> None:
    class StandIn:  # what a model's own unit tests may pass: the methods alone
        def __init__(self, name: str) -> None:
            self._label = name

        def name(self) -> str:
            return self._label

        def inputs(self) -> list[StandIn]:
            return [StandIn("A"), self]

    stand_in = StandIn("B")
    assert pb_utils.get_input_tensor_by_name(stand_in, "B") is stand_in  # type: ignore[arg-type]
    assert pb_utils.get_input_tensor_by_name(stand_in, "C") is None  # type: ignore[arg-type]
    # a request holding something else than Tensors among its inputs: looked up through their methods
    x = pb_utils.Tensor("X", np.zeros(1, np.int8))
    mixed = pb_utils.InferenceRequest(model_name="m", inputs=[stand_in, x])  # type: ignore[list-item]
    assert pb_utils.get_input_tensor_by_name(mixed, "X") is x


def test_a_responses_tensors_are_its_own_list() -> None:
    out = pb_utils.Tensor("OUT", np.ones(2, np.float32))
    tensors = [out]
    response = pb_utils.InferenceResponse(output_tensors=tensors)
    tensors.append(out)  # the model's list may change afterwards; the response keeps what it was given
    assert response.output_tensors() == [out] and response.parameters() == "{}"
    assert pb_utils.InferenceResponse((out,)).output_tensors() == [out]
    assert pb_utils.InferenceResponse().output_tensors() == []
    with pytest.raises(pb_utils.TritonModelException, match="list of Tensor, got dict"):
        pb_utils.InferenceResponse({"OUT": out})  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="must be a TritonError"):
        pb_utils.InferenceResponse([out], error="failed")  # type: ignore[arg-type]


def test_config_helpers() -> None:
    config = {
        "input": [{"name": "A", "dims": [2]}],
        "output": [{"name": "B"}],
        "model_transaction_policy": {"decoupled": True},
    }
    assert pb_utils.get_input_config_by_name(config, "A") == {"name": "A", "dims": [2]}
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B"}
    assert pb_utils.get_input_config_by_name(config, "C") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert not pb_utils.using_decoupled_model_transaction_policy({})


def _auto_config(**fields: object) -> pb_utils.ModelConfig:
    base = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(fields)
    return pb_utils.ModelConfig(json.dumps(base))


def test_auto_complete_helper_adds_and_checks() -> None:
    config = _auto_config(input=[{"name": "A", "data_type": "TYPE_INVALID", "dims": []}])
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "B", "data_type": "TYPE_INT8", "dims": [-1], "optional": True})
    config.add_output({"name": "C", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(16)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict()["input"] == [
        {"name": "A", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "B", "data_type": "TYPE_INT8", "dims": [-1], "optional": True},
    ]
    assert config.as_dict()["max_batch_size"] == 16 and config.as_dict()["dynamic_batching"] == {}
    assert config.as_dict()["model_transaction_policy"] == {"decoupled": False}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.add_input({"name": "A", "data_type": "TYPE_FP32"}), "lacks the 'dims' property"),
        (lambda c: c.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [1], "x": 1}), "only"),
        (
            lambda c: c.add_output({"name": "O", "data_type": "TYPE_FP32", "dims": [1], "optional": True}),
            "only",
        ),
        (lambda c: c.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [3]}), "data type TYPE_INT32"),
        (lambda c: c.add_input({"name": "I", "data_type": "TYPE_INT32", "dims": [2]}), r"dims \[3\]"),
        (lambda c: c.set_max_batch_size(2), "below the configured 4"),
        (lambda c: c.set_model_transaction_policy({"decoupled": False}), "decoupled to False"),
        (lambda c: c.set_model_transaction_policy({"other": 1}), "may only set 'decoupled'"),
    ],
)
def test_auto_complete_helper_refuses_conflicts(change: object, message: str) -> None:
    config = _auto_config(
        max_batch_size=4,
        input=[{"name": "I", "data_type": "TYPE_INT32", "dims": [3]}],
        model_transaction_policy={"decoupled": True},
    )
    with pytest.raises(ValueError, match=message):
        change(config)  # type: ignore[operator]


def test_dynamic_batching_conflicts_with_another_scheduler() -> None:
    with pytest.raises(ValueError, match="sequence_batching"):
        _auto_config(sequence_batching={}).set_dynamic_batching()


def test_logger_without_a_server_prints(capsys: pytest.CaptureFixture[str]) -> None:
    pb_utils.Logger.log_warn("careful")
    assert "test_pb_utils.py" in capsys.readouterr().err
    assert [
        pb_utils.Logger.INFO,
        pb_utils.Logger.WARNING,
        pb_utils.Logger.ERROR,
        pb_utils.Logger.VERBOSE,
    ] == [
        0,
        1,
        2,
        3,
    ]


@pytest.mark.parametrize("traced", [7, (7, None), (7, '{"traceparent": "00-1-2-01"}')])
def test_a_received_request_knows_its_trace_by_id_alone_or_with_its_context(traced: object) -> None:
    """The server sends a traced request's trace id alone where it has no context (Triton mode), or with
    its context (OpenTelemetry): either way the model sees the trace."""
    request = pb_utils.InferenceRequest._received([], "r", 0, 0, "{}", 0, (), 0, traced)  # type: ignore[arg-type]
    trace = request.trace()
    assert trace._id == 7
    assert trace.get_context() == (traced[1] if isinstance(traced, tuple) else None)
    assert pb_utils.InferenceRequest._received([], "r", 0, 0, "{}", 0, ()).trace()._id == 0


def test_a_request_of_a_model_in_the_server_process_makes_its_trace_from_the_servers_when_asked() -> None:
    """In the server process a request carries the server's own trace; the model's InferenceTrace, made
    only if the model asks for it, has its id and context, and holds it for the BLS calls made with it."""

    class ServerTrace:
        id = 9
        asked = 0

        def context(self) -> str:
            self.asked += 1
            return "ctx"

    server_trace = ServerTrace()
    request = pb_utils.InferenceRequest._received([], "r", 0, 0, "{}", 0, ())
    request._traced = server_trace
    assert server_trace.asked == 0
    trace = request.trace()
    assert (trace._id, trace.get_context(), trace._handle) == (9, "ctx", server_trace)
    assert request.trace() is trace and server_trace.asked == 1
