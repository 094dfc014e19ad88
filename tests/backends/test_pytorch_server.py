"""A TorchScript classifier in a running server: concurrent tritonclient requests over HTTP and gRPC
share executions and get the rows torch computes for them."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import start_nereid, stop

torch = pytest.importorskip("torch")

CLIENTS, REQUESTS = 8, 4
CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [3, 16, 16] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [10] }]
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return torch.softmax(self.head(y), dim=1)


def test_concurrent_clients_share_executions(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = torch.jit.script(TinyNet().eval())
    folder = tmp_path / "repository" / "tiny" / "1"
    folder.mkdir(parents=True)
    module.save(str(folder / "model.pt"))
    (folder.parent / "config.pbtxt").write_text(CONFIG)
    server = start_nereid(tmp_path / "repository", tmp_path / "nereid.log", grpc=True)

    def client(index: int) -> None:
        rng = np.random.default_rng(index)
        http = httpclient.InferenceServerClient(server.url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for request in range(REQUESTS):
                images = rng.standard_normal((1 + request % 2, 3, 16, 16), np.float32)
                module_, client_ = (httpclient, http) if request % 2 else (grpcclient, grpc)
                tensor = module_.InferInput("INPUT__0", list(images.shape), "FP32")
                tensor.set_data_from_numpy(images)
                result = client_.infer("tiny", [tensor]).as_numpy("OUTPUT__0")
                with torch.inference_mode():
                    expected = module(torch.from_numpy(images)).numpy()
                np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
        finally:
            http.close()
            grpc.close()

    try:
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(client, range(CLIENTS)))
        http = httpclient.InferenceServerClient(server.url)
        try:
            (stats,) = http.get_inference_statistics("tiny")["model_stats"]
        finally:
            http.close()
        assert stats["inference_stats"]["success"]["count"] == CLIENTS * REQUESTS
        assert stats["execution_count"] < CLIENTS * REQUESTS / 2, stats["execution_count"]
    finally:
        stop(server.process)
