"""GPU paths against a real `nereid` on a CUDA host: PyTorch KIND_GPU instances, Python models computing on
the GPU and handing tensors over by DLPack (in both execution modes, with BLS to the PyTorch model), CUDA
shared memory over HTTP and gRPC through tritonclient's own utilities, the GPU gauges of /metrics, and
ONNX Runtime's answer to KIND_GPU. Skipped, with the reason, on hosts without a CUDA device or without
the libraries these paths need."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nereid.gpus import pci_bus_ids, visible_gpu_count
from tests.conftest import PYTHON_EXECUTION_MODES, RunningServer, free_port, start_nereid, stop

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
# A Python model on the GPU as Triton's users write one: inputs to torch by DLPack, outputs from CUDA
# tensors (a bare capsule and a __dlpack__ object), a BLS call to the PyTorch model with GPU tensors, and
# what pb_utils said of its GPU tensors in FACTS.
PYTHON_GPU_MODEL = """
import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))
        self.kind = args["model_instance_kind"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = from_dlpack(pb_utils.get_input_tensor_by_name(request, "INPUT0").to_dlpack()).to(self.device)
            doubled = pb_utils.Tensor.from_dlpack("DOUBLED", to_dlpack(x * 2))
            plus_one = pb_utils.Tensor.from_dlpack("PLUS_ONE", x + 1)
            try:
                doubled.as_numpy()
                refused = ""
            except pb_utils.TritonModelException as exc:
                refused = str(exc)
            back = from_dlpack(plus_one.to_dlpack())
            bls = pb_utils.InferenceRequest(
                model_name="sum_gpu",
                requested_output_names=["OUTPUT__0"],
                inputs=[pb_utils.Tensor.from_dlpack("INPUT__0", x), pb_utils.Tensor.from_dlpack("INPUT__1", back)],
            )
            answer = bls.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            summed = pb_utils.get_output_tensor_by_name(answer, "OUTPUT__0")
            facts = {
                "kind": self.kind,
                "is_cpu": [doubled.is_cpu(), plus_one.is_cpu(), summed.is_cpu()],
                "refused": refused,
                "back_on": str(back.device),
                "dlpack_device": list(plus_one.__dlpack_device__()),
            }
            rows = np.full((x.shape[0], 1), json.dumps(facts).encode(), dtype=np.object_)
            outputs = [doubled, plus_one, summed, pb_utils.Tensor("FACTS", rows)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""
PYTHON_GPU_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] }]
output [
  { name: "DOUBLED" data_type: TYPE_INT32 dims: [16] },
  { name: "PLUS_ONE" data_type: TYPE_INT32 dims: [16] },
  { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [16] },
  { name: "FACTS" data_type: TYPE_STRING dims: [1] }
]
instance_group [{ kind: KIND_GPU }]
parameters { key: "EXECUTION_MODE" value { string_value: "%s" } }
"""
METRICS_PORT = free_port()
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
    for mode in PYTHON_EXECUTION_MODES:
        (repository / f"python_gpu_{mode}" / "1").mkdir(parents=True)
        (repository / f"python_gpu_{mode}" / "config.pbtxt").write_text(PYTHON_GPU_CONFIG % mode)
        (repository / f"python_gpu_{mode}" / "1" / "model.py").write_text(PYTHON_GPU_MODEL)
    server = start_nereid(
        repository,
        base / "nereid.log",
        "--model-control-mode=explicit",
        "--load-model=sum_gpu",
        *(f"--load-model=python_gpu_{mode}" for mode in PYTHON_EXECUTION_MODES),
        "--allow-client-shm=true",
        "--allow-metrics=true",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={METRICS_PORT}",
        "--metrics-interval-ms=200",
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


@pytest.mark.parametrize("mode", PYTHON_EXECUTION_MODES)
def test_a_python_model_computes_on_the_gpu_and_hands_tensors_over_by_dlpack(
    gpu_server: RunningServer, mode: str
) -> None:
    client = httpclient.InferenceServerClient(gpu_server.url)
    try:
        x = np.arange(32, dtype=np.int32).reshape(2, 16)
        tensor = httpclient.InferInput("INPUT0", [2, 16], "INT32")
        tensor.set_data_from_numpy(x)
        result = client.infer(f"python_gpu_{mode}", [tensor])
        np.testing.assert_array_equal(result.as_numpy("DOUBLED"), x * 2)
        np.testing.assert_array_equal(result.as_numpy("PLUS_ONE"), x + 1)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x + x + 1)  # BLS to sum_gpu, from the GPU
        facts = json.loads(result.as_numpy("FACTS")[0][0])
    finally:
        client.close()
    assert facts["kind"] == "GPU"
    # The tensors made from CUDA tensors say so, as Triton's do; BLS outputs come back in host memory.
    assert facts["is_cpu"] == [False, False, True]
    assert facts["refused"] == "Tensor is stored in GPU and cannot be converted to NumPy."
    assert facts["back_on"] == "cuda:0" and facts["dlpack_device"] == [2, 0]  # kDLCUDA, device 0


@pytest.mark.parametrize("producer", ["torch", "cupy", "jax"])
@pytest.mark.parametrize("handed_over", ["object", "capsule"])
def test_gpu_tensors_of_each_framework_by_dlpack(producer: str, handed_over: str) -> None:
    """pb_utils in this process, as a thread-mode model uses it: the GPU tensor stays the model's, and
    the host copy that responses and BLS requests carry holds its values."""
    from nereid.backends.python.worker import pb_utils

    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    if producer == "torch":
        on_gpu: Any = torch.from_numpy(values).cuda()
    elif producer == "cupy":
        on_gpu = pytest.importorskip("cupy").asarray(values)
    else:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU to the servers
        jax = pytest.importorskip("jax")
        on_gpu = jax.device_put(values, jax.devices("gpu")[0])
    tensor = pb_utils.Tensor.from_dlpack("X", on_gpu if handed_over == "object" else on_gpu.__dlpack__())
    assert not tensor.is_cpu() and tensor.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(tensor._array, values)  # the host copy
    np.testing.assert_array_equal(torch.from_dlpack(tensor.to_dlpack()).cpu().numpy(), values)
    with pytest.raises(pb_utils.TritonModelException, match="stored in GPU"):
        tensor.as_numpy()


def test_gpu_gauges_name_each_visible_device(gpu_server: RunningServer) -> None:
    pynvml = pytest.importorskip("pynvml", reason="the GPU gauges read NVML through nvidia-ml-py")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_ids()[0])
    uuid, total = pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetMemoryInfo(handle).total
    label = f'{{gpu_uuid="{uuid}"}}'
    deadline = time.monotonic() + 10
    while True:  # the first sample lands one interval after the metrics server starts
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples = dict(re.findall(r"^(\w+\{[^}]*\}) (\S+)$", text, re.M))
        if float(samples.get(f"nv_gpu_memory_total_bytes{label}", 0)) > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert float(samples[f"nv_gpu_memory_total_bytes{label}"]) == total // 2**20 * 2**20
    assert 0 < float(samples[f"nv_gpu_memory_used_bytes{label}"]) <= total  # the models' CUDA contexts
    assert 0 <= float(samples[f"nv_gpu_utilization{label}"]) <= 1
    assert float(samples[f"nv_gpu_power_limit{label}"]) > 0
    assert float(samples[f"nv_gpu_power_usage{label}"]) > 0
    assert float(samples[f"nv_energy_consumption{label}"]) >= 0
    assert len([line for line in text.splitlines() if line.startswith("nv_gpu_utilization{")]) == len(
        pci_bus_ids()
    )


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
