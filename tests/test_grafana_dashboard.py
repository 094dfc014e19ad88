"""docs/grafana/nereid-dashboard.json against a running server: every metric its PromQL names is one
that Nereid serves on /metrics, and a real Prometheus scraping Nereid accepts every panel's query and
answers the throughput panel's with data."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import EXAMPLES, ROOT, RunningServer, free_port, start_nereid, stop

DASHBOARD = ROOT / "docs" / "grafana" / "nereid-dashboard.json"
# PromQL words that are not metric names: functions, aggregations and their modifiers.
_PROMQL_WORDS = {
    "sum", "by", "without", "rate", "irate", "increase", "histogram_quantile", "avg", "max", "min", "count",
    "topk", "bottomk", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset",
    "label_values", "clamp_min", "clamp_max", "abs", "delta", "deriv",
}  # fmt: skip


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    return found


def referenced_metrics(expr: str) -> set[str]:
    """The metric names an expression reads: identifiers outside label matchers, ranges, grouping lists and
    strings that are not PromQL's own words."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"^label_values\((.*),\s*\w+\s*\)$", r"\1", text)  # Grafana's: its last argument is a label
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    return {name for name in names if name not in _PROMQL_WORDS}


def _concrete(expr: str) -> str:
    """A panel's query as Grafana sends it, its variables filled in."""
    return expr.replace("$__rate_interval", "1m").replace("$model", ".*")


@pytest.fixture(scope="module")
def nereid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, int]]:
    """Nereid with metrics on, serving `simple` with its response cache enabled (for the cache panel)."""
    base = tmp_path_factory.mktemp("dashboard")
    shutil.copytree(EXAMPLES / "simple", base / "models" / "simple")
    config = base / "models" / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "\nresponse_cache { enable: true }\n")
    metrics_port = free_port()
    server = start_nereid(
        base / "models",
        base / "nereid.log",
        "--allow-metrics=true",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics_port}",
        "--cache-config=local,size=1048576",
    )
    try:
        client = httpclient.InferenceServerClient(server.url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        for _ in range(3):  # the first misses the cache, the others hit it
            client.infer("simple", inputs)
        yield server, metrics_port
    finally:
        stop(server.process)


def test_the_dashboard_reads_only_metrics_nereid_serves(nereid: tuple[RunningServer, int]) -> None:
    _, metrics_port = nereid
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    served = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    expressions = _expressions(json.loads(DASHBOARD.read_text()))
    referenced = set().union(*(referenced_metrics(e) for e in expressions))
    assert {
        "nv_inference_count",
        "nereid_inference_batch_size_bucket",
        "nv_cache_num_hits_per_model",
    } <= referenced
    assert not any(name.startswith("nv_gpu") for name in referenced)  # it needs no GPU
    missing = sorted(referenced - served)
    assert not missing, f"the dashboard reads metrics Nereid does not serve: {missing}"


def test_referenced_metrics_are_read_from_promql() -> None:
    expr = 'histogram_quantile(0.99, sum by (model, le) (rate(nereid_x_bucket{model=~"$model"}[5m]))) / up'
    assert referenced_metrics(expr) == {"nereid_x_bucket", "up"}


def _prometheus() -> str | None:
    found = shutil.which("prometheus")
    if found is None and os.environ.get("CI") != "true":
        pytest.skip("Prometheus is not installed (apt-get install prometheus); CI installs it")
    assert found is not None, "CI installs Debian's prometheus package (.ci/run)"
    return found


def _query(port: int, expr: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a query Prometheus refuses (400) still has a JSON body
        return json.loads(exc.read())


def test_prometheus_scrapes_nereid_and_answers_the_dashboard(
    nereid: tuple[RunningServer, int], tmp_path: Path
) -> None:
    binary = _prometheus()
    _, metrics_port = nereid
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: nereid\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        throughput = _concrete('sum by (model) (rate(nv_inference_count{model=~"$model"}[$__rate_interval]))')
        deadline = time.monotonic() + 60
        answer: dict[str, Any] = {}
        while time.monotonic() < deadline:  # rate() needs two scrapes of the target
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                answer = _query(port, throughput)
            except OSError:  # not listening yet
                answer = {}
            if answer.get("data", {}).get("result"):
                break
            time.sleep(0.2)
        assert [r["metric"] for r in answer["data"]["result"]] == [{"model": "simple"}], answer
        for expr in _expressions(json.loads(DASHBOARD.read_text())):
            if expr.startswith("label_values("):  # a Grafana function, not PromQL
                continue
            result = _query(port, _concrete(expr))
            assert result["status"] == "success", (expr, result)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
