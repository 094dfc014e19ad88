"""The console's latest `nereid analyze` summary, read from the repositories the server serves."""

from __future__ import annotations

import asyncio
import os
import shutil

import orjson

from nereid.frontends.console.analysis import SUMMARY_FILE, latest_analysis
from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest
from nereid.server import build_engine
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES


def test_the_console_serves_the_newest_summary_and_404_without_one(tmp_path):
    repository = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repository / "simple")
    settings = ServerSettings(model_repositories=(repository,))
    engine = build_engine(settings)
    try:
        frontend = HttpFrontend(engine, settings)

        def get() -> tuple[int, dict]:
            answer = asyncio.run(frontend.handle(HttpRequest("GET", "/console/api/analysis", "", {}, b"")))
            return answer.status, orjson.loads(answer.body)

        status, body = get()
        assert status == 404 and "no nereid analyze report" in body["error"]
        summary = {"analyses": [{"models": ["simple"], "verdict": "Best: simple.instances=2", "top": []}]}
        (repository / SUMMARY_FILE).write_bytes(orjson.dumps(summary))
        assert get() == (200, summary)
        # the model folders still load: the summary beside them is not a model
        assert [m.name for m in engine.repository_index()] == ["simple"]
    finally:
        engine.shutdown()


def test_the_newest_of_several_repositories_wins(tmp_path):
    older, newer = tmp_path / "a", tmp_path / "b"
    for folder, text in ((older, b'{"analyses": ["old"]}'), (newer, b'{"analyses": ["new"]}')):
        folder.mkdir()
        (folder / SUMMARY_FILE).write_bytes(text)
    os.utime(older / SUMMARY_FILE, (1, 1))
    assert latest_analysis([older, newer, "s3://bucket/models"]) == b'{"analyses": ["new"]}'
    assert latest_analysis([tmp_path]) is None
