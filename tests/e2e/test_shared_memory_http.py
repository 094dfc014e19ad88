"""tritonclient's system shared memory utilities against a real `nereid`, over HTTP."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.conftest import RunningServer


def _client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url.removeprefix("http://"))


def test_simple_with_inputs_and_outputs_in_shared_memory(examples_server: RunningServer) -> None:
    client = _client(examples_server)
    tag = uuid.uuid4().hex[:8]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs_handle = shm.create_shared_memory_region(f"in_{tag}", f"/in_{tag}", 128)
    outputs_handle = shm.create_shared_memory_region(f"out_{tag}", f"/out_{tag}", 128)
    try:
        shm.set_shared_memory_region(inputs_handle, [a, b])
        client.register_system_shared_memory(f"in_{tag}", f"/in_{tag}", 128)
        client.register_system_shared_memory(f"out_{tag}", f"/out_{tag}", 128)
        status = {r["name"]: r for r in client.get_system_shared_memory_status()}
        assert status[f"in_{tag}"] == {
            "name": f"in_{tag}",
            "key": f"/in_{tag}",
            "offset": 0,
            "byte_size": 128,
        }

        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory(f"in_{tag}", 64)
        inputs[1].set_shared_memory(f"in_{tag}", 64, offset=64)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(f"out_{tag}", 64)
        outputs[1].set_shared_memory(f"out_{tag}", 64, offset=64)
        result = client.infer("simple", inputs, outputs=outputs)
        # the data went to shared memory, not into the body
        assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
        written = shm.get_contents_as_numpy(outputs_handle, np.int32, [2, 16])
        assert (written[0] == a + b).all() and (written[1] == a - b).all()

        # outputs that would overwrite each other are refused before the model runs
        outputs[1].set_shared_memory(f"out_{tag}", 64, offset=32)
        with pytest.raises(InferenceServerException, match="overlap in shared memory region"):
            client.infer("simple", inputs, outputs=outputs)
        # an output region too small for the result
        outputs[0].set_shared_memory(f"out_{tag}", 16)
        with pytest.raises(InferenceServerException, match="should be at least 64 bytes"):
            client.infer("simple", inputs, outputs=outputs[:1])
        client.unregister_system_shared_memory(f"in_{tag}")
        with pytest.raises(
            InferenceServerException, match=f"Unable to find shared memory region: 'in_{tag}'"
        ):
            client.infer("simple", inputs)
    finally:
        client.unregister_system_shared_memory(f"in_{tag}")
        client.unregister_system_shared_memory(f"out_{tag}")
        shm.destroy_shared_memory_region(inputs_handle)
        shm.destroy_shared_memory_region(outputs_handle)
        client.close()


def test_string_model_with_shared_memory(examples_server: RunningServer) -> None:
    client = _client(examples_server)
    tag = uuid.uuid4().hex[:8]
    a = np.array([str(i).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    blob_a, blob_b = serialize_byte_tensor(a).item(), serialize_byte_tensor(b).item()
    size = len(blob_a) + len(blob_b)
    handle = shm.create_shared_memory_region(f"s_{tag}", f"/s_{tag}", size)
    try:
        shm.set_shared_memory_region(handle, [np.frombuffer(blob_a + blob_b, dtype=np.uint8)])
        client.register_system_shared_memory(f"s_{tag}", f"/s_{tag}", size)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
            httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_shared_memory(f"s_{tag}", len(blob_a))
        inputs[1].set_shared_memory(f"s_{tag}", len(blob_b), offset=len(blob_a))
        result = client.infer("simple_string", inputs)
        assert [int(x) for x in result.as_numpy("OUTPUT0").reshape(-1)] == [i + 1 for i in range(16)]
    finally:
        client.unregister_system_shared_memory(f"s_{tag}")
        shm.destroy_shared_memory_region(handle)
        client.close()


def test_registration_errors(examples_server: RunningServer) -> None:
    client = _client(examples_server)
    try:
        with pytest.raises(
            InferenceServerException, match="Unable to open shared memory region: '/nereid_absent'"
        ):
            client.register_system_shared_memory("absent", "/nereid_absent", 16)
        with pytest.raises(
            InferenceServerException, match="Unable to find system shared memory region: 'absent'"
        ):
            client.get_system_shared_memory_status("absent")
        assert client.get_cuda_shared_memory_status() == []
    finally:
        client.close()
