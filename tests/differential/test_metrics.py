"""Prometheus metrics on the real Triton and on Nereid after the same requests: same family names,
types, label sets and request counts."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest

from tests.conftest import free_ports
from tests.differential.test_differential import CASES, _send, server_pair

pytestmark = pytest.mark.differential

SIMPLE_INFER = next(c for c in CASES if c["name"] == "infer JSON")
# families that describe models or the host's CPU: GPU, pinned memory and cache families depend on the build
COMPARED = re.compile(r"nv_inference_\w+|nv_cpu_\w+")


@pytest.fixture(scope="module")
def metrics_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, str]]:
    triton_port, nereid_port = free_ports(2)
    with server_pair(
        tmp_path_factory.mktemp("metrics"),
        "--allow-metrics=true",
        triton_flags=(f"--metrics-port={triton_port}",),
        nereid_flags=(f"--metrics-port={nereid_port}", "--metrics-address=127.0.0.1"),
    ) as pair:
        yield (
            pair.triton_http,
            pair.nereid_http,
            f"http://127.0.0.1:{triton_port}/metrics",
            f"http://127.0.0.1:{nereid_port}/metrics",
        )


def _families(url: str) -> dict[str, tuple[str, dict[frozenset[str], float]]]:
    """family -> (type, {label names + model label value: value}) for the compared families."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    families: dict[str, tuple[str, dict[frozenset[str], float]]] = {}
    for name, labels, value in re.findall(r"^(\w+)(?:\{(.*)\})? (\S+)$", text, re.M):
        if not COMPARED.fullmatch(name):
            continue
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = frozenset(f"{k}={v}" if k in ("model", "version", "reason") else k for k, v in pairs.items())
        families.setdefault(name, (types.get(name, "untyped"), {}))[1][key] = float(value)
    return families


def test_same_families_labels_and_counts(metrics_urls: tuple[str, str, str, str]) -> None:
    triton, nereid, triton_metrics, nereid_metrics = metrics_urls
    for _ in range(3):
        assert _send(triton, SIMPLE_INFER)[0] == 200
        assert _send(nereid, SIMPLE_INFER)[0] == 200
    t, n = _families(triton_metrics), _families(nereid_metrics)
    assert set(t) == set(n)
    for name, (t_type, t_samples) in t.items():
        n_type, n_samples = n[name]
        assert t_type == n_type, name
        assert set(t_samples) == set(n_samples), name
    simple = frozenset({"model=simple", "version=1"})
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        assert t[name][1][simple] == n[name][1][simple] == 3, name
