"""Triton's own HTTP client, sync and aio, against a real `nereid` process on Triton's example models."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer


def _int_inputs(
    dtype: type, datatype: str, binary: bool
) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=dtype)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], datatype),
        httpclient.InferInput("INPUT1", [1, 16], datatype),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs, a, b


def test_health_and_server_metadata(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    assert "binary_tensor_data" in metadata["extensions"]
    assert "classification" in metadata["extensions"]


def test_model_metadata_config_and_readiness(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")
    metadata = client.get_model_metadata("simple")
    assert metadata["versions"] == ["1"]
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ]
    config = client.get_model_config("simple", "1")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize(
    ("model", "dtype", "datatype"), [("simple", np.int32, "INT32"), ("simple_int8", np.int8, "INT8")]
)
def test_infer_add_sub(
    triton_examples_server: RunningServer, binary: bool, model: str, dtype: type, datatype: str
) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    inputs, a, b = _int_inputs(dtype, datatype, binary)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = client.infer(model, inputs, outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0").dtype == dtype
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["model_name"] == model
    assert response["model_version"] == "1"


def test_infer_string_model(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    a = np.array([str(i).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    for binary in (False, True):
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
            httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        result = client.infer("simple_string", inputs)
        assert [int(x) for x in result.as_numpy("OUTPUT0").reshape(-1)] == [i + 1 for i in range(16)]
        assert [int(x) for x in result.as_numpy("OUTPUT1").reshape(-1)] == [i - 1 for i in range(16)]


def test_batch_of_eight_and_requested_subset(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    a = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [8, 16], "INT32"),
        httpclient.InferInput("INPUT1", [8, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((8, 16), dtype=np.int32))
    assert result.as_numpy("OUTPUT0") is None


def test_errors_reach_the_client(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    inputs, _, _ = _int_inputs(np.int32, "INT32", True)
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.infer("nope", inputs)
    bad = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    for tensor in bad:
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="INPUT0.*FP32.*INT32|data-type"):
        client.infer("simple", bad)
    big = [
        httpclient.InferInput("INPUT0", [9, 16], "INT32"),
        httpclient.InferInput("INPUT1", [9, 16], "INT32"),
    ]
    for tensor in big:
        tensor.set_data_from_numpy(np.zeros((9, 16), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
        client.infer("simple", big)
    # the server still serves after bad requests
    good, a, b = _int_inputs(np.int32, "INT32", False)
    np.testing.assert_array_equal(client.infer("simple", good).as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_both_ways(triton_examples_server: RunningServer, algorithm: str) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url)
    inputs, a, b = _int_inputs(np.int32, "INT32", True)
    result = client.infer(
        "simple", inputs, request_compression_algorithm=algorithm, response_compression_algorithm=algorithm
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_async_infer_many(triton_examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(triton_examples_server.url, concurrency=4)
    pending = []
    for i in range(16):
        a = np.full((1, 16), i, dtype=np.int32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        pending.append((i, client.async_infer("simple", inputs)))
    for i, request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), np.full((1, 16), 2 * i))
    client.close()


def test_aio_client(triton_examples_server: RunningServer) -> None:
    async def run() -> None:
        client = aioclient.InferenceServerClient(triton_examples_server.url)
        try:
            assert await client.is_server_ready()
            assert (await client.get_model_metadata("simple_string"))["inputs"][0]["datatype"] == "BYTES"
            results = await asyncio.gather(
                *[client.infer("simple", _int_inputs(np.int32, "INT32", bool(i % 2))[0]) for i in range(8)]
            )
            for result in results:
                np.testing.assert_array_equal(
                    result.as_numpy("OUTPUT1"), np.arange(16, dtype=np.int32).reshape(1, 16) - 1
                )
        finally:
            await client.close()

    asyncio.run(run())


def test_classification_with_labels(examples_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(examples_server.url)
    x = np.array([[0.0, 3.0, 1.0, 2.0], [4.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(
        "simple_classifier", [tensor], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (2, 2)
    first = [item.decode().split(":") for item in top[0]]
    assert [(index, label) for _, index, label in first] == [("1", "dog"), ("3", "fish")]
    softmax = np.exp(x[0]) / np.exp(x[0]).sum()
    assert float(first[0][0]) == pytest.approx(softmax[1], abs=1e-6)
    assert top[1][0].decode().endswith(":0:cat")
