"""GPU paths against a real `nereid` on a CUDA host: PyTorch KIND_GPU instances, CUDA shared memory over
HTTP and gRPC through tritonclient's own utilities, and ONNX Runtime's answer to KIND_GPU. Skipped, with
the reason, on hosts without a CUDA device or without the libraries these paths need."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nereid.gpus import visible_gpu_count
from tests.conftest import RunningServer, start_nereid, stop

if visible_gpu_count() == 0:
    pytest.skip("no CUDA device on this host", allow_module_level=True)
torch = pytest.importorskip("torch", reason="the PyTorch backend's GPU path needs torch")
if not torch.cuda.is_available():
    pytest.skip("this torch build has no CUDA support", allow_module_level=True)

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

# "sum and difference, and where the model ran": OUTPUT__2 is 1 on a CUDA device, 0 on the CPU.
CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0" data_type: TYPE_INT32 dims: [16] },
  { name: "INPUT__1" data_type: TYPE_INT32 dims: [16] }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [16] },
  { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [16] },
  { name: "OUTPUT__2" data_type: TYPE_INT32 dims: [1] }
]
instance_group [{ kind: KIND_GPU }]
"""
ONNX_CONFIG = 'backend: "onnxruntime"\nmax_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]\n'


class SumDifference(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        on_gpu = torch.ones_like(a[:, :1]) if a.is_cuda else torch.zeros_like(a[:, :1])
        return a + b, a - b, on_gpu


def _onnx_identity(path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [None, 4])],
    )
    # IR version 8: any onnxruntime of the last years reads it, whatever onnx wrote by default
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("gpu")
    repository = base / "models"
    (repository / "sum_gpu" / "1").mkdir(parents=True)
    (repository / "sum_gpu" / "config.pbtxt").write_text(CONFIG)
    torch.jit.script(SumDifference()).save(str(repository / "sum_gpu" / "1" / "model.pt"))
    (repository / "onnx_gpu" / "1").mkdir(parents=True)
    (repository / "onnx_gpu" / "config.pbtxt").write_text(ONNX_CONFIG)
    _onnx_identity(repository / "onnx_gpu" / "1" / "model.onnx")
    server = start_nereid(
        repository,
        base / "nereid.log",
        "--model-control-mode=explicit",
        "--load-model=sum_gpu",
        "--allow-client-shm=true",
        grpc=True,
    )
    try:
        yield server
    finally:
        stop(server.process)


def _inputs(module: object) -> tuple[np.ndarray, np.ndarray, list]:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    inputs = [
        module.InferInput("INPUT__0", [2, 16], "INT32"),
        module.InferInput("INPUT__1", [2, 16], "INT32"),
    ]
    return a, b, inputs


def test_pytorch_kind_gpu_instance_runs_on_cuda(gpu_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(gpu_server.url)
    try:
        a, b, inputs = _inputs(httpclient)
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("sum_gpu", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)
        assert result.as_numpy("OUTPUT__2").ravel().tolist() == [1, 1]  # the model saw CUDA tensors
        # As in Triton, the loaded config places the GPU group on the visible devices.
        group = client.get_model_config("sum_gpu")["instance_group"][0]
        assert group["kind"] == "KIND_GPU"
        assert group["gpus"] == list(range(visible_gpu_count()))
        statistics = client.get_inference_statistics("sum_gpu")["model_stats"][0]
        assert statistics["inference_count"] == 2 and statistics["execution_count"] == 1
    finally:
        client.close()


def test_onnx_kind_gpu_without_the_cuda_provider_fails_to_load(gpu_server: RunningServer) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider; the refusal is for CPU-only builds")
    client = httpclient.InferenceServerClient(gpu_server.url)
    try:
        # Refused with the reason rather than quietly run on the CPU.
        with pytest.raises(InferenceServerException, match="asks for KIND_GPU, but ONNX Runtime has no CUDA"):
            client.load_model("onnx_gpu")
    finally:
        client.close()


@pytest.fixture
def cuda_regions() -> Iterator[tuple[object, object]]:
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("the server's CUDA shared memory needs nereid[cuda] (CuPy)")
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except ImportError as exc:  # tritonclient's utilities need cuda-python
        pytest.skip(f"tritonclient's CUDA shared memory utilities cannot load: {exc}")
    inputs = cudashm.create_shared_memory_region("gpu_inputs", 256, 0)
    outputs = cudashm.create_shared_memory_region("gpu_outputs", 264, 0)
    try:
        yield cudashm, (inputs, outputs)
    finally:
        cudashm.destroy_shared_memory_region(inputs)
        cudashm.destroy_shared_memory_region(outputs)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_inputs_and_outputs(
    gpu_server: RunningServer, cuda_regions: tuple[object, tuple], protocol: str
) -> None:
    cudashm, (in_handle, out_handle) = cuda_regions
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(gpu_server.url if protocol == "http" else gpu_server.grpc_url)
    a, b, inputs = _inputs(module)
    cudashm.set_shared_memory_region(in_handle, [a, b])
    try:
        client.register_cuda_shared_memory("gpu_inputs", cudashm.get_raw_handle(in_handle), 0, 256)
        client.register_cuda_shared_memory("gpu_outputs", cudashm.get_raw_handle(out_handle), 0, 264)
        status = client.get_cuda_shared_memory_status()
        if protocol == "http":
            listed = {r["name"]: r for r in status}
            assert listed["gpu_inputs"] == {"name": "gpu_inputs", "device_id": 0, "byte_size": 256}
        else:
            assert status.regions["gpu_outputs"].byte_size == 264
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_cuda_shared_memory("gpu_inputs", cudashm.get_raw_handle(in_handle), 0, 256)

        inputs[0].set_shared_memory("gpu_inputs", 128)
        inputs[1].set_shared_memory("gpu_inputs", 128, offset=128)
        outputs = [module.InferRequestedOutput(f"OUTPUT__{i}") for i in range(3)]
        outputs[0].set_shared_memory("gpu_outputs", 128)
        outputs[1].set_shared_memory("gpu_outputs", 128, offset=128)
        outputs[2].set_shared_memory("gpu_outputs", 8, offset=256)
        result = client.infer("sum_gpu", inputs, outputs=outputs)
        # written to the region, not into the response
        if protocol == "http":
            assert "data" not in result.get_output("OUTPUT__0")
        else:
            assert not any(result.get_response().raw_output_contents)  # empty entries keep the indices
        np.testing.assert_array_equal(cudashm.get_contents_as_numpy(out_handle, np.int32, [2, 16]), a + b)
        written = cudashm.get_contents_as_numpy(out_handle, np.int32, [66])
        np.testing.assert_array_equal(written[32:64].reshape(2, 16), a - b)
        assert written[64:].tolist() == [1, 1]

        # a span past the region's end is refused before the model runs
        inputs[1].set_shared_memory("gpu_inputs", 128, offset=200)
        with pytest.raises(InferenceServerException, match="Invalid offset \\+ byte size"):
            client.infer("sum_gpu", inputs, outputs=outputs)
        client.unregister_cuda_shared_memory("gpu_inputs")
        remaining = client.get_cuda_shared_memory_status()
        names = [r["name"] for r in remaining] if protocol == "http" else list(remaining.regions)
        assert names == ["gpu_outputs"]
    finally:
        client.unregister_cuda_shared_memory()
        client.close()
