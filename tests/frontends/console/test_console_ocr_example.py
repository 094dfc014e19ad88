"""The bundled OCR pipeline (examples/ocr) in the console: an image drawn with the example's font is
uploaded, and what the pipeline read is drawn over it."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningServer, start_nereid, stop

OCR = Path(__file__).resolve().parents[3] / "examples" / "ocr"


@pytest.fixture(scope="module")
def ocr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("console_ocr")
    shutil.copytree(OCR / "model_repository", base / "repository")
    server = start_nereid(base / "repository", base / "nereid.log")
    try:
        yield server
    finally:
        stop(server.process)


def _image(text: str) -> bytes:
    spec = importlib.util.spec_from_file_location("ocr_font", OCR / "font.py")
    assert spec is not None and spec.loader is not None
    font = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(font)
    return font.to_pgm(font.render(text, 4))


def test_the_example_pipeline_answer_is_drawn_over_the_image(browser: Any, ocr_server: RunningServer) -> None:
    context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"http://{ocr_server.url}/console#/try/ocr")
        page.locator('input[type="file"][data-input="IMAGE"]').set_input_files(
            {"name": "hello.pgm", "mimeType": "image/x-portable-graymap", "buffer": _image("HELLO\n2026")}
        )
        page.get_by_role("button", name="Send").click()
        overlay = page.get_by_test_id("ocr-overlay")
        overlay.wait_for()
        assert page.get_by_test_id("ocr-text").inner_text().split() == ["HELLO", "2026"]
        # whether the pipeline boxes characters or lines, the labels spell what it read, over the image
        labels = overlay.locator("text")
        read = [re.sub(r" [0-9.]+$", "", label) for label in labels.all_text_contents()]  # less any score
        assert "".join(read).replace(" ", "") == "HELLO2026"
        image = page.locator("figure.ocr canvas").bounding_box()
        for label in labels.all():
            box = label.bounding_box()
            assert image["x"] - 2 <= box["x"] <= image["x"] + image["width"]
            assert image["y"] - 2 <= box["y"] <= image["y"] + image["height"]
        assert overlay.locator("polygon").count() >= 2
    finally:
        context.close()
