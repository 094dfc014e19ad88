"""The bundled OCR pipeline (examples/ocr, pretrained PP-OCR models) in the console: a page drawn with a
real font is uploaded, and what the pipeline read is drawn over it."""

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
# As tests/test_ocr_example.py: without the `ocr` extra or the fonts these skip; CI installs both.
for _name in ("cv2", "pyclipper", "shapely", "rapidocr_onnxruntime", "PIL"):
    pytest.importorskip(_name, reason="the OCR example needs: pip install -e '.[ocr]'")


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"console_ocr_{name}", OCR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_render = _module("render")
if not all(path.is_file() for path in _render.FONTS.values()):
    pytest.skip(
        "the OCR tests draw with: apt-get install fonts-dejavu-core fonts-wqy-microhei",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def ocr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    _module("prepare").prepare(OCR / "model_repository")
    base = tmp_path_factory.mktemp("console_ocr")
    shutil.copytree(OCR / "model_repository", base / "repository")
    server = start_nereid(base / "repository", base / "nereid.log")
    try:
        yield server
    finally:
        stop(server.process)


def _image(lines: list[str]) -> bytes:
    return bytes(_render.render(lines, "sans", image_format="PNG"))


def test_the_example_pipeline_answer_is_drawn_over_the_image(browser: Any, ocr_server: RunningServer) -> None:
    context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"http://{ocr_server.url}/console#/try/ocr")
        page.locator('input[type="file"][data-input="IMAGE"]').set_input_files(
            {"name": "hello.png", "mimeType": "image/png", "buffer": _image(["HELLO", "2026"])}
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
