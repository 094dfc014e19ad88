"""The console's routes in process: page and assets, live snapshots, the off switch, restrictions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest

from nereid.cli import parse_settings
from nereid.core.engine import Engine
from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.server import build_engine
from nereid.settings import RestrictedApi, ServerSettings
from nereid.types import InferRequest, InferTensor
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        yield engine
    finally:
        engine.shutdown()


def _get(frontend: HttpFrontend, path: str, **headers: str) -> HttpResponse:
    return asyncio.run(frontend.handle(HttpRequest("GET", path, "", headers, b"")))


def _infer(engine: Engine) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    request = InferRequest(
        "simple", "", [InferTensor("INPUT0", "INT32", (1, 16), a), InferTensor("INPUT1", "INT32", (1, 16), a)]
    )
    asyncio.run(engine.infer(request))


def test_page_and_assets_ship_in_the_package(engine: Engine) -> None:
    frontend = HttpFrontend(engine, ServerSettings(model_repositories=(EXAMPLES,)))
    page = _get(frontend, "/console")
    assert page.status == 200
    headers = dict(page.headers)
    assert headers[b"content-type"].startswith(b"text/html")
    assert b"default-src 'self'" in headers[b"content-security-policy"]  # nothing loads from elsewhere
    for asset in (b"/console/static/js/main.js", b"/console/static/vendor/uPlot.iife.min.js"):
        assert asset in page.body
        answer = _get(frontend, asset.decode())
        assert answer.status == 200 and dict(answer.headers)[b"content-type"].startswith(b"text/javascript")
    licence = _get(frontend, "/console/static/vendor/uPlot.LICENSE")
    assert licence.status == 200 and b"MIT" in licence.body
    assert _get(frontend, "/console/static/../app.py").status == 404
    assert _get(frontend, "/console/nothing").status == 404
    post = asyncio.run(frontend.handle(HttpRequest("POST", "/console", "", {}, b"")))
    assert post.status == 405


def test_live_snapshot_counts_requests_and_their_durations(engine: Engine) -> None:
    frontend = HttpFrontend(engine, ServerSettings(model_repositories=(EXAMPLES,)))
    before = orjson.loads(_get(frontend, "/console/api/live").body)
    for _ in range(3):
        _infer(engine)
    after = orjson.loads(_get(frontend, "/console/api/live").body)
    assert set(after["server"]) >= {"cpu_utilization", "memory_total_bytes", "process_memory_bytes"}
    assert after["server"]["memory_total_bytes"] > after["server"]["process_memory_bytes"] > 0

    def simple(snapshot: dict) -> dict:
        return next(m for m in snapshot["models"] if m["name"] == "simple")

    old, new = simple(before), simple(after)
    assert new["stats"]["success"]["count"] - old["stats"]["success"]["count"] == 3
    assert new["batch_sizes"]["1"] - old["batch_sizes"].get("1", 0) == 3
    # the request-duration histogram: cumulative, +Inf last, and it counted the three requests
    buckets = new["request_duration_us"]
    assert buckets[-1][0] is None and [b for b, _ in buckets[:-1]] == sorted(b for b, _ in buckets[:-1])
    assert buckets[-1][1] - old["request_duration_us"][-1][1] == 3
    assert new["hint"] is None  # less than a second of history: no hint yet


def test_console_off(engine: Engine) -> None:
    settings, _ = parse_settings(["--model-repository", str(EXAMPLES), "--allow-console=false"])
    assert settings.allow_console is False
    frontend = HttpFrontend(engine, settings)
    assert _get(frontend, "/console").status == 404
    assert _get(frontend, "/console/api/live").status == 404
    on, _ = parse_settings(["--model-repository", str(EXAMPLES)])
    assert on.allow_console is True


def test_live_snapshot_obeys_a_restricted_statistics_api(engine: Engine) -> None:
    rule = RestrictedApi(frozenset({"statistics"}), "x-key", "secret")
    frontend = HttpFrontend(
        engine, ServerSettings(model_repositories=(EXAMPLES,), http_restricted_api=(rule,))
    )
    refused = _get(frontend, "/console/api/live")
    assert refused.status == 403
    assert orjson.loads(refused.body) == {"error": "This API is restricted, expecting header 'x-key'"}
    assert _get(frontend, "/console/api/live", **{"x-key": "secret"}).status == 200
    assert _get(frontend, "/console").status == 200  # the page itself holds no data


def test_every_static_file_is_package_data() -> None:
    """What the page loads is listed in pyproject's package data, so an installed wheel has it."""
    static = Path(__file__).parents[3] / "nereid" / "frontends" / "console" / "static"
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    patterns = {"static/*.*", "static/js/*", "static/vendor/*"}
    assert all(f'"{p}"' in pyproject for p in patterns)
    for path in static.rglob("*"):
        if path.is_file():
            relative = path.relative_to(static.parent)
            assert any(relative.match(p) for p in patterns), relative
