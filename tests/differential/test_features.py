"""The response cache, model warmup and the rate limiter on the real Triton and on Nereid: one repository of
Python models, both servers with a local cache and `--rate-limit=execution_count`, and the statistics and
metrics each feature leaves compared value for value.
"""

from __future__ import annotations

import concurrent.futures
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.differential.conftest import HERE
from tests.differential.real_triton import triton_cache_flag
from tests.differential.test_batching import (
    WAIT_S,
    Held,
    Server,
    _infer,
    _keys,
    _metric,
    _stats,
    _until,
    servers_with_metrics,
)

pytestmark = pytest.mark.differential

MODELS = HERE / "feature_models"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str) -> Iterator[list[Server]]:
    base = tmp_path_factory.mktemp("features")
    repository = base / "repository"
    shutil.copytree(MODELS, repository, ignore=shutil.ignore_patterns("*.md"))
    for model in repository.iterdir():
        (model / "1").mkdir()
        shutil.copy(HERE / "batching_models" / "gated" / "1" / "model.py", model / "1")
    with servers_with_metrics(
        base,
        repository,
        python_execution_mode,
        "--cache-config=local,size=1048576",
        "--rate-limit=execution_count",
        "--rate-limit-resource=R:1",
        triton_flags=(triton_cache_flag(),),
    ) as pair:
        yield pair


def _counts(stats: dict) -> dict[str, int]:
    """Every count of a model's statistics (durations vary between servers; counts must not)."""
    inference = stats["inference_stats"]
    counts = {f"{name}.count": inference[name]["count"] for name in inference}
    counts |= {"inference_count": stats["inference_count"], "execution_count": stats["execution_count"]}
    for batch in stats["batch_stats"]:
        counts[f"batch {batch['batch_size']}"] = batch["compute_infer"]["count"]
    return counts


def test_cache_hits_and_misses_are_counted_alike(servers: list[Server]) -> None:
    seen = {}
    for server in servers:
        answers = [_infer(server, "cached", v) for v in (1.0, 1.0, 1.0, 2.0)]
        assert [status for status, _ in answers] == [200] * 4, server.name
        # a hit answers what the execution answered: the same outputs, N from the execution it came from
        assert answers[1][1]["outputs"] == answers[0][1]["outputs"] == answers[2][1]["outputs"], server.name
        assert answers[3][1]["outputs"][0]["data"] == [4.0, 4.0]
        _until(
            lambda: _stats(server, "cached")["inference_stats"]["success"]["count"] == 4,  # noqa: B023
            f"{server.name} to record the last request",
        )
        stats = _stats(server, "cached")
        seen[server.name] = stats
        assert stats["inference_stats"]["cache_hit"]["ns"] > 0, server.name
        for family, value in (
            ("nv_cache_num_hits_per_model", 2),
            ("nv_cache_num_misses_per_model", 2),
            ("nv_inference_request_success", 4),
            ("nv_inference_count", 2),  # cached requests are no inferences
            ("nv_inference_exec_count", 2),
        ):
            assert _metric(server, family, "cached") == value, (server.name, family)
    assert _counts(seen["nereid"]) == _counts(seen["triton"])
    assert _counts(seen["triton"]) == {
        "success.count": 4,
        "fail.count": 0,
        "queue.count": 4,  # hits count as queued, with no execution behind them
        "compute_input.count": 2,
        "compute_infer.count": 2,
        "compute_output.count": 2,
        "cache_hit.count": 2,
        "cache_miss.count": 2,
        "inference_count": 2,
        "execution_count": 2,
        "batch 1": 2,
    }
    assert _keys(seen["triton"]) == _keys(seen["nereid"])


def test_warmup_is_counted_in_the_statistics_as_triton_counts_it(servers: list[Server]) -> None:
    """Two instances each ran `zeros` (batch 2) twice and `random` (batch 1) once before the model was
    ready: Triton 2.51 counts those requests and executions like any others."""
    seen = {}
    for server in servers:
        seen[server.name] = _counts(_stats(server, "warmed"))
        assert _metric(server, "nv_inference_exec_count", "warmed") == 6, server.name
        assert _metric(server, "nv_inference_count", "warmed") == 10, server.name
    assert seen["nereid"] == seen["triton"]
    assert seen["triton"] == {
        "success.count": 10,
        "fail.count": 0,
        "queue.count": 10,
        "compute_input.count": 10,
        "compute_infer.count": 10,
        "compute_output.count": 10,
        "cache_hit.count": 0,
        "cache_miss.count": 0,
        "inference_count": 10,
        "execution_count": 6,
        "batch 1": 2,
        "batch 2": 4,
    }
    for server in servers:
        status, body = _infer(server, "warmed", 3.0)
        assert status == 200 and body["outputs"][0]["data"] == [6.0, 6.0], server.name
        _until(
            lambda: _counts(_stats(server, "warmed"))["execution_count"] == 7,  # noqa: B023
            f"{server.name} to count the request after warmup",
        )


def test_models_sharing_a_resource_wait_for_each_other(servers: list[Server], tmp_path: Path) -> None:
    """R:1 and each model's instance needs R: while `holder` runs, `first` and `second` wait in their
    queues, unexecuted; then they run, and their statistics agree."""
    seen = {}
    for server in servers:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            held = Held(server, "holder", tmp_path / f"{server.name}-holder", pool)
            waiting = [pool.submit(_infer, server, model, 1.0) for model in ("first", "second")]
            for model in ("first", "second"):
                _until(
                    lambda: _metric(server, "nv_inference_pending_request_count", model) == 1,  # noqa: B023
                    f"{server.name} to queue a request for {model}",
                )
                assert _stats(server, model)["execution_count"] == 0, (server.name, model)
            assert not any(w.done() for w in waiting), server.name
            assert held.release()[0] == 200
            assert [w.result(WAIT_S)[0] for w in waiting] == [200, 200], server.name
        for model in ("holder", "first", "second"):  # Triton records a request just after its response
            _until(
                lambda: _stats(server, model)["inference_stats"]["success"]["count"] == 1,  # noqa: B023
                f"{server.name} to record the request to {model}",
            )
        seen[server.name] = {model: _counts(_stats(server, model)) for model in ("holder", "first", "second")}
        for model in ("holder", "first", "second"):
            assert _metric(server, "nv_inference_pending_request_count", model) == 0
    assert seen["nereid"] == seen["triton"]
    assert seen["triton"]["first"]["execution_count"] == seen["triton"]["second"]["execution_count"] == 1
