"""The models page shows the latest `nereid analyze` summary of the repository served (in Chromium).

A module of its own: while Playwright's sync API is open, asyncio.run() in this thread fails."""

from __future__ import annotations

import shutil

import orjson

from nereid.frontends.console.analysis import SUMMARY_FILE
from tests.conftest import EXAMPLES, start_nereid, stop
from tests.frontends.console.conftest import browser  # noqa: F401 (the fixture)


def test_the_models_page_shows_the_latest_analysis(tmp_path, browser):  # noqa: F811
    repository = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repository / "simple")
    top = [
        {
            "key": "a",
            "rank": 1,
            "describe": "simple.instances=2",
            "best": {"throughput": 2468.0, "p99_ms": 1.5},
        },
        {
            "key": "b",
            "rank": 2,
            "describe": "the models' own configs",
            "best": {"throughput": 1234.0, "p99_ms": 1.2},
        },
    ]
    summary = {
        "analyses": [
            {
                "created": "2026-01-02T03:04:05+00:00",
                "models": ["simple"],
                "chosen": "a",
                "verdict": "Best: simple.instances=2: 2,468 infer/s",
                "top": top,
            }
        ]
    }
    (repository / SUMMARY_FILE).write_bytes(orjson.dumps(summary))
    server = start_nereid(repository, tmp_path / "nereid.log")
    tab = browser.new_page()
    try:
        tab.goto(f"http://{server.url}/console#/models")
        section = tab.get_by_test_id("analysis")
        section.wait_for()
        assert "Best: simple.instances=2: 2,468 infer/s" in section.inner_text()
        assert section.locator("tr.chosen td").nth(1).inner_text() == "simple.instances=2"
        assert section.locator("tbody tr").count() == 2
    finally:
        tab.close()
        stop(server.process)
