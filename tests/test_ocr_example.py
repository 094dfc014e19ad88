"""The OCR example (examples/ocr) with its pretrained PP-OCR models: images the tests draw, in English and
Chinese, are read back through the ensemble and the BLS pipeline over HTTP and gRPC, and agree with the
models' own reference pipeline (rapidocr_onnxruntime's RapidOCR) called directly."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer, child_processes, start_nereid, stop

OCR = Path(__file__).resolve().parent.parent / "examples" / "ocr"
# Without the `ocr` extra (pip install -e '.[ocr]') or the fonts the pages are drawn with, these tests
# skip, as the framework backends' do without their frameworks; CI installs both.
for _module_name in ("cv2", "pyclipper", "shapely", "rapidocr_onnxruntime"):
    pytest.importorskip(_module_name, reason="the OCR example needs: pip install -e '.[ocr]'")
Image = pytest.importorskip("PIL.Image", reason="the OCR example needs: pip install -e '.[ocr]'")


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ocr_example_{name}", OCR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_module = _module("render")
render = render_module.render
if not all(path.is_file() for path in render_module.FONTS.values()):
    pytest.skip(
        "the OCR tests draw with: apt-get install fonts-dejavu-core fonts-wqy-microhei",
        allow_module_level=True,
    )
client_module = _module("client")
prepare = _module("prepare").prepare

# (lines, font, image format): one and several lines, English and Chinese
PAGES = {
    "english": (["Hello Nereid 2026"], "sans", "PNG"),
    "english-lines": (["The quick brown fox", "jumps over 13 lazy dogs"], "serif", "JPEG"),
    "chinese": (["你好，世界"], "cjk", "PNG"),
    "chinese-lines": (["文字识别模型", "推理服务器"], "cjk", "WEBP"),
    "mixed": (["光学字符识别 OCR 2026", "Serving several models as one"], "cjk", "PNG"),
}


def _image(page: str) -> bytes:
    lines, font, image_format = PAGES[page]
    return render(lines, font, image_format=image_format)


def _squeezed(texts: list[str]) -> list[str]:
    return [t.replace(" ", "") for t in texts]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    prepare(OCR / "model_repository")
    base = tmp_path_factory.mktemp("ocr")
    shutil.copytree(OCR / "model_repository", base / "repository")
    running = start_nereid(base / "repository", base / "nereid.log", grpc=True)
    try:
        yield running
    finally:
        stop(running.process)


@pytest.fixture(scope="module")
def reference() -> Any:
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR()


def _client(server: RunningServer, protocol: str) -> Any:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    return httpclient.InferenceServerClient(server.url)


def _read(server: RunningServer, model: str, protocol: str, image: bytes) -> list[tuple[str, list, float]]:
    with _client(server, protocol) as client:
        return client_module.read_text(client, model, image, protocol)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["ocr", "ocr_bls"])
@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_pipeline_reads_drawn_text(server: RunningServer, model: str, protocol: str, page: str) -> None:
    regions = _read(server, model, protocol, _image(page))
    assert _squeezed([text for text, _, _ in regions]) == _squeezed(PAGES[page][0])
    assert all(score > 0.9 for _, _, score in regions)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_same_as_the_reference_pipeline(server: RunningServer, reference: Any, page: str) -> None:
    image = _image(page)
    expected, _ = reference(image)
    for model in ("ocr", "ocr_bls"):
        regions = _read(server, model, "http", image)
        assert [text for text, _, _ in regions] == [text for _, text, _ in expected]
        np.testing.assert_allclose([box for _, box, _ in regions], [box for box, _, _ in expected], atol=1)
        np.testing.assert_allclose([s for _, _, s in regions], [s for _, _, s in expected], atol=0.02)


def test_upside_down_text_is_turned_by_the_classifier(server: RunningServer) -> None:
    page = Image.open(io.BytesIO(render(["Upside down 42"], "sans")))
    out = io.BytesIO()
    page.rotate(180).save(out, "PNG")
    for model in ("ocr", "ocr_bls"):
        assert _squeezed([t for t, _, _ in _read(server, model, "http", out.getvalue())]) == ["Upsidedown42"]


def test_transparency_and_grayscale(server: RunningServer) -> None:
    page = Image.open(io.BytesIO(render(["Alpha 7"], "sans"))).convert("L")
    rgba = Image.new("RGBA", page.size, (0, 0, 0, 0))  # transparent: white behind it, as PP-OCR does
    rgba.putalpha(Image.eval(page, lambda v: 255 - v))
    for image in (page, rgba):
        out = io.BytesIO()
        image.save(out, "PNG")
        assert [t for t, _, _ in _read(server, "ocr", "http", out.getvalue())] == ["Alpha 7"]


@pytest.mark.parametrize("model", ["ocr", "ocr_bls"])
def test_a_page_without_text(server: RunningServer, model: str) -> None:
    out = io.BytesIO()
    Image.new("RGB", (800, 800), "white").save(out, "PNG")
    assert _read(server, model, "http", out.getvalue()) == []


@pytest.mark.parametrize("model", ["ocr", "ocr_bls"])
def test_a_file_that_is_not_an_image_is_the_clients_error(server: RunningServer, model: str) -> None:
    for data in (b"GIF89a", b"not an image at all", _image("english")[:200]):
        with pytest.raises(InferenceServerException, match="IMAGE") as http_error:
            _read(server, model, "http", data)
        assert http_error.value.status() == "400"
        with pytest.raises(InferenceServerException, match="IMAGE") as grpc_error:
            _read(server, model, "grpc", data)
        assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert _squeezed([t for t, _, _ in _read(server, model, "http", _image("english"))]) == [
        "HelloNereid2026"
    ]


def _detector_counts(server: RunningServer) -> tuple[int, int]:
    with httpclient.InferenceServerClient(server.url) as client:
        stats = client.get_inference_statistics("text_detection")["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_pages_run_one_at_a_time_in_the_server_process(server: RunningServer) -> None:
    """The example's CPU-saving settings: the detector runs each page alone (a batch of large pages
    costs more CPU per page), and the Python steps run in the server process, not in workers."""
    pages = [_image("english-lines"), _image("chinese-lines")] * 3
    before = _detector_counts(server)
    with concurrent.futures.ThreadPoolExecutor(len(pages)) as pool:
        results = list(pool.map(lambda page: _read(server, "ocr", "http", page), pages))
    assert [len(r) for r in results] == [2] * len(pages)
    after = _detector_counts(server)
    assert (after[0] - before[0], after[1] - before[1]) == (len(pages), len(pages))
    assert child_processes(server.process.pid) == []


@pytest.fixture
def patient_server(tmp_path: Path) -> Iterator[RunningServer]:
    """The example, with a recogniser that waits up to 2 s for 4 crops (two pages) before it runs."""
    prepare(OCR / "model_repository")
    shutil.copytree(OCR / "model_repository", tmp_path / "repository")
    config = tmp_path / "repository" / "text_recognition" / "config.pbtxt"
    config.write_text(
        re.sub(
            r"dynamic_batching \{[^}]*\}",
            "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }",
            config.read_text(),
        )
    )
    running = start_nereid(tmp_path / "repository", tmp_path / "nereid.log")
    try:
        yield running
    finally:
        stop(running.process)


def test_the_recogniser_batches_crops_across_requests(patient_server: RunningServer) -> None:
    """Pages of different sizes and line lengths (both pipelines) meet in the recogniser's batches."""
    pages = [
        render(["The quick brown fox", "jumps over 13 lazy dogs"], "serif"),
        render(["Serving several models", "as one"], "sans", size=36),
    ]
    calls = [(model, page) for model in ("ocr", "ocr_bls") for page in pages] * 2
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(lambda call: _read(patient_server, call[0], "http", call[1]), calls))
    assert [len(r) for r in results] == [2] * len(calls)
    with httpclient.InferenceServerClient(patient_server.url) as client:
        stats = client.get_inference_statistics("text_recognition")["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) == len(calls)
    assert int(stats["inference_count"]) == 2 * len(calls)  # crops
    assert int(stats["execution_count"]) < len(calls)  # some batches held the crops of several pages


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_client_script(server: RunningServer, tmp_path: Path, protocol: str) -> None:
    image = tmp_path / "page.png"
    image.write_bytes(_image("chinese-lines"))
    url = server.url if protocol == "http" else f"127.0.0.1:{server.grpc_port}"
    command = [sys.executable, str(OCR / "client.py"), str(image), "-u", url, "-i", protocol, "-m", "ocr_bls"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == "文字识别模型\n推理服务器\n"
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, check=True)
    regions = json.loads(done.stdout)["regions"]
    assert [r["text"] for r in regions] == ["文字识别模型", "推理服务器"]
    assert all(len(r["box"]) == 4 and r["score"] > 0.9 for r in regions)
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    refused = subprocess.run(
        [*command[:2], str(text), *command[3:]], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert "IMAGE is not an image file" in refused.stderr
