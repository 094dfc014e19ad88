"""A toy OCR pipeline (7x5 glyph templates, PGM/PPM input) kept as a fixture of the ensemble and BLS
machinery: its ONNX models are in sync with the build script, and the ensemble reads text
drawn with the example's font on a real server, through the example's own client."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer, start_nereid, stop

OCR = Path(__file__).resolve().parent / "ocr_toy"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, OCR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


font = _module("font")
client_module = _module("client")


def test_committed_models_match_the_build_script(tmp_path: Path) -> None:
    _module("build_models").build_models(tmp_path)
    for name in ("text_detection", "text_recognition"):
        built = (tmp_path / name / "1" / "model.onnx").read_bytes()
        assert built == (OCR / "model_repository" / name / "1" / "model.onnx").read_bytes(), (
            "run: python tests/ocr_toy/build_models.py"
        )


def test_the_alphabet_in_the_config_is_the_fonts() -> None:
    config = (OCR / "model_repository" / "ocr_postprocess" / "config.pbtxt").read_text()
    assert f'string_value: "{font.ALPHABET}"' in config


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("ocr")
    shutil.copytree(OCR / "model_repository", base / "repository")
    running = start_nereid(base / "repository", base / "nereid.log")
    try:
        yield running
    finally:
        stop(running.process)


@pytest.mark.parametrize("model", ["ocr", "ocr_bls"])  # the ensemble, and the same steps through BLS
@pytest.mark.parametrize(
    ("text", "scale"),
    [("HELLO NEREID\n2026", 4), ("THE QUICK BROWN FOX JUMPS\nOVER 13 LAZY DOGS 0123456789", 2), ("", 3)],
)
def test_the_pipeline_reads_drawn_text(server: RunningServer, model: str, text: str, scale: int) -> None:
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        read, confidence, boxes = client_module.read_text(
            client, model, font.to_pgm(font.render(text, scale))
        )
    assert read == text
    assert len(boxes) == len(text.replace(" ", "").replace("\n", ""))
    assert confidence > 0.9


def test_a_color_image_with_a_comment_in_its_header(server: RunningServer) -> None:
    gray = font.render("RGB 42", 3)
    height, width = gray.shape
    ppm = f"P6\n# drawn by a test\n{width} {height}\n255\n".encode() + np.stack([gray] * 3, axis=-1).tobytes()
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        assert client_module.read_text(client, "ocr", ppm)[0] == "RGB 42"


def test_a_text_pgm(server: RunningServer) -> None:
    gray = font.render("P2 IS TEXT", 2)
    height, width = gray.shape
    pgm = f"P2 {width} {height} 255\n".encode() + " ".join(str(v) for v in gray.reshape(-1)).encode()
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        assert client_module.read_text(client, "ocr", pgm)[0] == "P2 IS TEXT"


def test_a_file_that_is_not_an_image_is_refused(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        with pytest.raises(
            InferenceServerException, match=r"in ensemble 'ocr', IMAGE is not a PGM or PPM file"
        ):
            client_module.read_text(client, "ocr", b"GIF89a")


def test_bls_passes_a_step_error_on(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        with pytest.raises(
            InferenceServerException, match=r"ocr_preprocess: .*IMAGE is not a PGM or PPM file"
        ):
            client_module.read_text(client, "ocr_bls", b"GIF89a")


def test_the_client_script(server: RunningServer) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(OCR / "client.py"),
            "--url",
            server.url.removeprefix("http://"),
            "--text",
            "OCR 1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == "OCR 1\n"
