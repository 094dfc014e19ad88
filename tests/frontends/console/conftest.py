"""A real Chromium (the system's, driven by Playwright) against a real server with the console on."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, RunningServer, start_nereid, stop

MODELS = Path(__file__).parent / "models"


def _chromium() -> str | None:
    for name in (os.environ.get("NEREID_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


# Module scope: while Playwright's sync API is open, its event loop counts as running in this thread, so
# asyncio.run() in the tests of other modules would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        message = "needs Chromium (apt-get install chromium) and Playwright (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs both: a missing browser there is a broken CI, not a skip
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def console_repository(target: Path) -> Path:
    shutil.copytree(EXAMPLES / "simple", target / "simple")
    shutil.copytree(MODELS / "ocr_boxes", target / "ocr_boxes")
    return target


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("console")
    repository = console_repository(base / "repository")
    server = start_nereid(repository, base / "nereid.log", "--model-control-mode=explicit", "--load-model=*")
    try:
        yield server
    finally:
        stop(server.process)
