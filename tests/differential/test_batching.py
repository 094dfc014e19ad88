"""Dynamic batching on the real Triton and on Nereid: the same Python models, the same queued requests.

A gated request holds the model's only instance while the test queues others behind it (it watches the
pending-request gauge), so which requests share an execution is decided, not left to timing. Then both
servers must agree on the batches, the statistics, the metrics, and the queue's refusals.
"""

from __future__ import annotations

import concurrent.futures
import re
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import execution_mode_flags, free_ports
from tests.differential.conftest import HERE, server_pair
from tests.differential.test_differential import _send

pytestmark = pytest.mark.differential

WAIT_S = 60.0


@dataclass(frozen=True)
class Server:
    name: str
    http: str
    metrics: str


@contextmanager
def servers_with_metrics(
    base: Path, repository: Path, python_execution_mode: str, *flags: str, triton_flags: tuple[str, ...] = ()
) -> Iterator[list[Server]]:
    """Triton and Nereid on `repository` with `flags`, each with its metrics endpoint."""
    triton_port, nereid_port = free_ports(2)
    with server_pair(
        base,
        "--allow-metrics=true",
        *flags,
        repository=repository,
        triton_flags=(f"--metrics-port={triton_port}", *triton_flags),
        nereid_flags=(
            f"--metrics-port={nereid_port}",
            "--metrics-address=127.0.0.1",
            *execution_mode_flags(python_execution_mode),
        ),
    ) as pair:
        yield [
            Server("triton", pair.triton_http, f"http://127.0.0.1:{triton_port}/metrics"),
            Server("nereid", pair.nereid_http, f"http://127.0.0.1:{nereid_port}/metrics"),
        ]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str) -> Iterator[list[Server]]:
    base = tmp_path_factory.mktemp("batching")
    repository = base / "repository"
    shutil.copytree(HERE / "batching_models", repository)
    for name in ("limited", "timed"):  # the same model behind other queue policies
        (repository / name / "1").mkdir()
        shutil.copy(repository / "gated" / "1" / "model.py", repository / name / "1")
    with servers_with_metrics(base, repository, python_execution_mode) as pair:
        yield pair


def _infer(server: Server, model: str, value: float, gate: Path | None = None) -> tuple[int, Any]:
    inputs: list[dict[str, Any]] = [
        {"name": "X", "datatype": "FP32", "shape": [1, 2], "data": [value, value]}
    ]
    if gate is not None:
        inputs.append({"name": "GATE", "datatype": "BYTES", "shape": [1, 1], "data": [str(gate)]})
    case = {"method": "POST", "path": f"/v2/models/{model}/infer", "json": {"inputs": inputs}}
    status, _, body = _send(server.http, case)
    return status, orjson.loads(body)


def _metric(server: Server, family: str, model: str) -> float:
    text = urllib.request.urlopen(server.metrics, timeout=10).read().decode()
    match = re.search(rf'^{family}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    assert match, f"{server.name}: no {family} for {model}"
    return float(match.group(1))


def _pending(server: Server, model: str) -> float:
    return _metric(server, "nv_inference_pending_request_count", model)


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _stats(server: Server, model: str) -> dict[str, Any]:
    status, _, body = _send(server.http, {"method": "GET", "path": f"/v2/models/{model}/stats"})
    assert status == 200
    return orjson.loads(body)["model_stats"][0]


class Held:
    """One request holding the model's instance; the test queues others, then opens the gate."""

    def __init__(self, server: Server, model: str, gate: Path, pool: concurrent.futures.Executor) -> None:
        self.gate = gate
        self.answer = pool.submit(_infer, server, model, 0.0, gate)
        _until(lambda: Path(f"{gate}.started").exists() or self.answer.done(), f"{server.name} to start")
        assert not self.answer.done(), self.answer.result()

    def release(self) -> tuple[int, Any]:
        self.gate.touch()
        return self.answer.result(WAIT_S)


def _queue_behind(server: Server, model: str, tmp_path: Path, values: list[float]) -> list[tuple[int, Any]]:
    with concurrent.futures.ThreadPoolExecutor(len(values) + 1) as pool:
        held = Held(server, model, tmp_path / f"{server.name}-{model}", pool)
        answers = [pool.submit(_infer, server, model, v) for v in values]
        _until(
            lambda: _metric(server, "nv_inference_pending_request_count", model) == len(values),
            f"{server.name} to queue {len(values)} requests",
        )
        assert held.release()[0] == 200
        return [a.result(WAIT_S) for a in answers]


def test_requests_queued_behind_a_busy_instance_run_as_one_execution(
    servers: list[Server], tmp_path: Path
) -> None:
    seen = {}
    for server in servers:
        answers = _queue_behind(server, "gated", tmp_path, [1.0, 2.0, 3.0, 4.0, 5.0])
        for value, (status, body) in zip([1.0, 2.0, 3.0, 4.0, 5.0], answers, strict=True):
            assert status == 200, body
            outputs = {o["name"]: o["data"] for o in body["outputs"]}
            assert outputs == {"Y": [value * 2, value * 2], "N": [5]}, server.name
        stats = _stats(server, "gated")
        assert (stats["inference_count"], stats["execution_count"]) == (6, 2), server.name
        assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
            (1, 1),
            (5, 1),
        ]
        assert stats["inference_stats"]["success"]["count"] == 6
        assert stats["inference_stats"]["compute_infer"]["count"] == 6  # per request, as in Triton
        assert _metric(server, "nv_inference_exec_count", "gated") == 2
        assert _metric(server, "nv_inference_count", "gated") == 6
        assert _metric(server, "nv_inference_pending_request_count", "gated") == 0
        seen[server.name] = stats
    assert _keys(seen["triton"]) == _keys(seen["nereid"])


def _keys(value: Any) -> Any:
    """The JSON shape: keys and nesting, without the values."""
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(v) for v in value[:1]]
    return type(value).__name__


def test_a_full_queue_refuses_requests_with_the_same_error(servers: list[Server], tmp_path: Path) -> None:
    refusals = []
    for server in servers:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            held = Held(server, "limited", tmp_path / f"{server.name}-limited", pool)
            queued = [pool.submit(_infer, server, "limited", v) for v in (1.0, 2.0)]
            _until(lambda: _pending(server, "limited") == 2, "queueing")  # noqa: B023
            refusals.append(_infer(server, "limited", 3.0))
            assert held.release()[0] == 200
            assert [q.result(WAIT_S)[0] for q in queued] == [200, 200]
        stats = _stats(server, "limited")
        # refused at the door: counted nowhere
        assert stats["inference_stats"]["fail"]["count"] == 0
        assert stats["inference_stats"]["success"]["count"] == 3
    assert refusals[0][0] == refusals[1][0] == 503
    assert (
        refusals[0][1] == refusals[1][1] == {"error": "[request id: <id_unknown>] Exceeds maximum queue size"}
    )


def test_a_request_past_its_queue_timeout_is_rejected(servers: list[Server], tmp_path: Path) -> None:
    rejections = []
    for server in servers:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            held = Held(server, "timed", tmp_path / f"{server.name}-timed", pool)
            sent = time.monotonic()
            late = pool.submit(_infer, server, "timed", 1.0)
            _until(lambda: late.done() or _pending(server, "timed") == 1, "queueing")  # noqa: B023
            # the model's queue timeout is 100 ms: let it pass before the instance frees up
            time.sleep(max(0.0, sent + 0.3 - time.monotonic()))
            assert held.release()[0] == 200
            rejections.append(late.result(WAIT_S))
        stats = _stats(server, "timed")
        assert stats["inference_stats"]["fail"]["count"] == 1, server.name
        assert (
            urllib.request.urlopen(server.metrics, timeout=10)
            .read()
            .decode()
            .count('nv_inference_request_failure{model="timed",reason="REJECTED",version="1"} 1')
            == 1
        ), server.name
    assert rejections[0] == rejections[1] == (503, {"error": "Request timeout expired"})
