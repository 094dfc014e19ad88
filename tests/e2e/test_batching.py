"""Dynamic batching in a running server: concurrent clients over HTTP and gRPC share executions of an
ONNX model, and each gets its own rows back."""

from __future__ import annotations

import concurrent.futures
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import EXAMPLES, RunningServer, start_nereid, stop

CLIENTS, REQUESTS = 16, 8


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("batching")
    shutil.copytree(EXAMPLES / "simple", base / "repository" / "simple")
    config = base / "repository" / "simple" / "config.pbtxt"
    # The delay makes concurrent requests wait for each other, so they share executions.
    config.write_text(
        config.read_text()
        + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        + "instance_group [ { kind: KIND_CPU count: 2 } ]\n"
    )
    server = start_nereid(base / "repository", base / "nereid.log", grpc=True)
    try:
        yield server
    finally:
        stop(server.process)


def _client(server: RunningServer, index: int) -> int:
    """REQUESTS requests of 1 to 3 rows, alternating HTTP and gRPC; returns the rows sent."""
    rng = np.random.default_rng(index)
    http = httpclient.InferenceServerClient(server.url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    rows_sent = 0
    try:
        for request in range(REQUESTS):
            rows = int(rng.integers(1, 4))
            a = rng.integers(-1000, 1000, (rows, 16), dtype=np.int32)
            b = rng.integers(-1000, 1000, (rows, 16), dtype=np.int32)
            module, client = (httpclient, http) if request % 2 else (grpcclient, grpc)
            inputs = [
                module.InferInput("INPUT0", [rows, 16], "INT32"),
                module.InferInput("INPUT1", [rows, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            rows_sent += rows
    finally:
        http.close()
        grpc.close()
    return rows_sent


def test_concurrent_clients_share_executions_and_get_their_own_rows(batching_server: RunningServer) -> None:
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        rows = sum(pool.map(lambda i: _client(batching_server, i), range(CLIENTS)))
    client = httpclient.InferenceServerClient(batching_server.url)
    try:
        (stats,) = client.get_inference_statistics("simple")["model_stats"]
    finally:
        client.close()
    requests = CLIENTS * REQUESTS
    assert stats["inference_stats"]["success"]["count"] == requests
    assert stats["inference_count"] == rows
    # well below one execution per request: the batcher put concurrent requests together
    assert stats["execution_count"] < requests / 2, stats["execution_count"]
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert max(sizes) > 3 and max(sizes) <= 8  # larger than any one request, never past max_batch_size
