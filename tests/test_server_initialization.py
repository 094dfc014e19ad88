"""A missing model repository: the server fails to initialize, and with --exit-on-error=false keeps its
endpoints up, neither live nor ready, as Triton does."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest
from nereid.repository.manager import RepositoryMissing
from nereid.server import _cannot_serve, build_engine
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES


def test_a_missing_repository_stops_start_up_by_default(tmp_path: Path) -> None:
    with pytest.raises(RepositoryMissing, match="does not exist"):
        build_engine(ServerSettings(model_repositories=(EXAMPLES, tmp_path / "missing")))


def test_without_exit_on_error_the_endpoints_stay_up_not_live(tmp_path: Path) -> None:
    settings = ServerSettings(model_repositories=(EXAMPLES, tmp_path / "missing"), exit_on_error=False)
    engine = build_engine(settings)
    try:
        assert not engine.is_live() and not engine.is_ready()
        assert not [r for r in engine.models.index() if r.get("state") == "READY"]  # nothing loads
        app = HttpFrontend(engine, settings)

        def get(path: str) -> int:
            return asyncio.run(app.handle(HttpRequest("GET", path, "", {}, b""))).status

        assert get("/v2") == 200
        assert get("/v2/health/live") != 200 and get("/v2/health/ready") != 200
    finally:
        engine.shutdown()


def test_http_and_metrics_ports_in_use_are_told_in_tritons_words() -> None:
    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    assert _cannot_serve("HTTP", "0.0.0.0", 8000, in_use).message == (
        "failed to start HTTP service: Unavailable - Socket '0.0.0.0:8000' already in use"
    )
    other = _cannot_serve("Metrics", "10.9.9.9", 8002, OSError(errno.EADDRNOTAVAIL, "Cannot assign"))
    assert other.message.startswith("failed to start Metrics service: cannot serve on 10.9.9.9:8002")
