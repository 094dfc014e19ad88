"""The response cache in a running server: hits skip the model, statistics and metrics in Triton's shape,
Redis shared by two servers, and a Redis that goes away costs no request."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.cache.conftest import REDIS_PASSWORD
from tests.conftest import EXAMPLES, ROOT, RunningServer, free_ports, start_nereid, stop


def _repository(base: Path) -> Path:
    repository = base / "model_repository"
    shutil.copytree(EXAMPLES / "simple", repository / "simple")
    with (repository / "simple" / "config.pbtxt").open("a") as config:
        config.write("\nresponse_cache { enable: true }\n")
    shutil.copytree(EXAMPLES / "simple_int8", repository / "simple_int8")  # not cached
    return repository


def _infer(server: RunningServer, value: int, model: str = "simple") -> np.ndarray:
    client = httpclient.InferenceServerClient(server.url)
    dtype, datatype = (np.int32, "INT32") if model == "simple" else (np.int8, "INT8")
    a = np.full((1, 16), value, dtype)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], datatype),
        httpclient.InferInput("INPUT1", [1, 16], datatype),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    result = client.infer(model, inputs).as_numpy("OUTPUT0")
    assert result is not None
    return result


def _stats(server: RunningServer, model: str = "simple") -> dict:
    client = httpclient.InferenceServerClient(server.url)
    (stats,) = client.get_inference_statistics(model)["model_stats"]
    return stats  # type: ignore[no-any-return]


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[RunningServer]:
    server = start_nereid(
        _repository(tmp_path),
        tmp_path / "nereid.log",
        "--cache-config=local,size=1048576",
        "--allow-metrics=true",
    )
    try:
        yield server
    finally:
        stop(server.process)


def test_a_hit_skips_the_model_and_counts_as_triton_counts_it(local_server: RunningServer) -> None:
    assert _infer(local_server, 3).tolist() == [[4] * 16]
    assert _infer(local_server, 3).tolist() == [[4] * 16]  # from the cache
    assert _infer(local_server, 5).tolist() == [[6] * 16]  # other inputs: a miss
    stats = _stats(local_server)
    inference = stats["inference_stats"]
    assert stats["execution_count"] == 2 and stats["inference_count"] == 2
    assert inference["success"]["count"] == 3
    assert inference["cache_hit"]["count"] == 1 and inference["cache_miss"]["count"] == 2
    assert inference["cache_hit"]["ns"] > 0 and inference["cache_miss"]["ns"] > 0
    # A model whose config does not enable the cache runs every time.
    _infer(local_server, 1, "simple_int8")
    _infer(local_server, 1, "simple_int8")
    uncached = _stats(local_server, "simple_int8")
    assert uncached["execution_count"] == 2 and uncached["inference_stats"]["cache_hit"]["count"] == 0


def test_cache_metrics_per_model(tmp_path: Path) -> None:
    http_port, metrics_port = free_ports(2)
    server = start_nereid(
        _repository(tmp_path),
        tmp_path / "nereid.log",
        "--cache-config=local,size=1048576",
        "--allow-metrics=true",
        f"--metrics-port={metrics_port}",
        "--metrics-address=127.0.0.1",
    )
    try:
        _infer(server, 3)
        _infer(server, 3)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        stop(server.process)
    assert 'nv_cache_num_hits_per_model{model="simple",version="1"} 1' in text
    assert 'nv_cache_num_misses_per_model{model="simple",version="1"} 1' in text
    assert 'nv_cache_num_hits_per_model{model="simple_int8"' not in text


def _redis_flags(port: int) -> tuple[str, ...]:
    return (
        "--cache-config=redis,host=127.0.0.1",
        f"--cache-config=redis,port={port}",
        f"--cache-config=redis,password={REDIS_PASSWORD}",
        "--cache-config=redis,timeout_ms=300",
    )


def test_two_servers_share_a_redis_cache(tmp_path: Path, redis_server: int) -> None:
    first = start_nereid(_repository(tmp_path / "a"), tmp_path / "a.log", *_redis_flags(redis_server))
    second = start_nereid(_repository(tmp_path / "b"), tmp_path / "b.log", *_redis_flags(redis_server))
    try:
        assert _infer(first, 7).tolist() == [[8] * 16]
        assert _infer(second, 7).tolist() == [[8] * 16]  # the first server's answer, from Redis
        assert _stats(second)["execution_count"] == 0
        assert _stats(second)["inference_stats"]["cache_hit"]["count"] == 1
    finally:
        stop(first.process)
        stop(second.process)


def test_a_redis_that_goes_away_costs_no_request(tmp_path: Path, redis_server: int) -> None:
    server = start_nereid(_repository(tmp_path), tmp_path / "nereid.log", *_redis_flags(redis_server))
    try:
        _infer(server, 2)
        subprocess.run(
            ["redis-cli", "-p", str(redis_server), "-a", REDIS_PASSWORD, "shutdown", "nosave"],
            capture_output=True,
            check=False,
        )
        for value in (2, 3, 3):
            assert _infer(server, value).tolist() == [[value + 1] * 16]  # served without the cache
        assert _stats(server)["execution_count"] == 4
    finally:
        stop(server.process)
    assert server.log().count("response cache lookup failed") == 1


def test_a_server_whose_redis_refuses_it_does_not_start(tmp_path: Path, redis_server: int) -> None:
    flags = [f for f in _redis_flags(redis_server) if "password" not in f]
    done = subprocess.run(
        [sys.executable, "-m", "nereid", f"--model-repository={_repository(tmp_path)}", "--allow-grpc=false",
         "--allow-metrics=false", f"--http-port={free_ports(1)[0]}", "--http-address=127.0.0.1", *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Failed to initialize RedisCache: NOAUTH Authentication required" in done.stderr


def test_a_decoupled_model_with_the_cache_enabled_fails_to_load(tmp_path: Path) -> None:
    """Triton refuses the config (its responses are a stream); the other models serve."""
    repository = _repository(tmp_path)
    shutil.copytree(ROOT / "tests" / "pipelines" / "models" / "repeat", repository / "repeat")
    with (repository / "repeat" / "config.pbtxt").open("a") as config:
        config.write("\nresponse_cache { enable: true }\n")
    server = start_nereid(
        repository,
        tmp_path / "nereid.log",
        "--cache-config=local,size=1048576",
        "--exit-on-error=false",
        "--strict-readiness=false",
    )
    try:
        index = httpclient.InferenceServerClient(server.url).get_model_repository_index()
    finally:
        stop(server.process)
    states = {m["name"]: (m["state"], m.get("reason", "")) for m in index}
    assert states["simple"][0] == "READY"
    assert states["repeat"] == (
        "UNAVAILABLE",
        "Response Cache does not currently support model repeat with 'decoupled' transaction policy. "
        "Please disable the response cache.",
    )
