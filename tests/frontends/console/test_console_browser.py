"""What a person sees in the console, in a real browser: models and their states, charts that move,
an unload that changes the row, a try-it request's outputs and an OCR answer drawn over its image."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import RunningServer, start_nereid, stop
from tests.frontends.console.conftest import console_repository

TIMEOUT_MS = 20_000


@pytest.fixture
def page(browser: Any, console_server: RunningServer) -> Iterator[Any]:
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(TIMEOUT_MS)
    try:
        yield page
        assert errors == []  # no script error on the page
    finally:
        context.close()


def _open(page: Any, server: RunningServer, route: str) -> None:
    page.goto(f"http://{server.url}/console#/{route}")


def _row(page: Any, model: str) -> Any:
    return page.locator(f'tr[data-model="{model}"]')


def test_models_page_shows_each_model_with_state_and_config(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "models")
    simple = _row(page, "simple")
    simple.locator(".state").get_by_text("READY").wait_for()
    cells = simple.locator("td").all_inner_texts()
    assert cells[:3] == ["simple", "1", "READY"]
    assert cells[4:8] == ["onnxruntime", "onnxruntime_onnx", "2 × CPU", "max 8, no batcher"]
    ocr = _row(page, "ocr_boxes")
    assert ocr.locator("td").all_inner_texts()[4:8] == ["python", "", "1 × CPU", "none (max_batch_size 0)"]
    # the completed configuration, folded under the row
    page.locator('tr[data-model="simple"] + tr summary').click()
    assert '"max_batch_size": 8' in page.locator('tr[data-model="simple"] + tr pre').inner_text()


def test_unload_changes_the_row_and_load_restores_it(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "models")
    row = _row(page, "simple")
    row.locator('button[data-action="unload"]').click()
    row.locator(".state").get_by_text("UNAVAILABLE").wait_for()
    assert row.locator(".reason").inner_text() == "unloaded"
    assert page.get_by_test_id("models-notice").inner_text() == "Unloaded 'simple'."
    row.locator('button[data-action="load"]').click()
    row.locator(".state").get_by_text("READY").wait_for()
    assert page.get_by_test_id("models-notice").inner_text() == "Loaded 'simple'."


def _send_until(server: RunningServer, stop_sending: threading.Event) -> None:
    client = httpclient.InferenceServerClient(server.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    while not stop_sending.is_set():
        client.infer("simple", inputs)


def test_live_charts_move_when_requests_arrive(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "live/simple")
    canvas = page.locator('[data-testid="chart-throughput"] canvas')
    canvas.wait_for()
    page.wait_for_function("() => document.querySelector('[data-testid=now-cpu]')?.textContent.includes('%')")
    before = canvas.evaluate("c => c.toDataURL()")
    stop_sending = threading.Event()
    sender = threading.Thread(target=_send_until, args=(console_server, stop_sending))
    sender.start()
    try:
        # the throughput shown reaches a positive rate, and the latency a number
        page.wait_for_function(
            "() => parseFloat(document.querySelector('[data-testid=now-throughput]')?.textContent) > 0"
        )
        page.wait_for_function(
            "() => /p50 [0-9]/.test(document.querySelector('[data-testid=now-latency]')?.textContent)"
        )
        page.wait_for_function(
            "() => document.querySelector('[data-testid=hint]')?.dataset.code === 'batcher_off'"
        )
    finally:
        stop_sending.set()
        sender.join()
    assert canvas.evaluate("c => c.toDataURL()") != before  # the line was redrawn with the new points
    assert "dynamic batching is off" in page.get_by_test_id("hint").inner_text()
    # every simple request is a batch of one
    assert page.get_by_test_id("now-batches").inner_text() == "mean 1.00"


def test_try_it_sends_the_form_and_shows_the_outputs(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "try/simple")
    page.locator('textarea[name="INPUT0"]').fill(" ".join(str(i) for i in range(16)))
    page.locator('textarea[name="INPUT1"]').fill("[" + ",".join(["1"] * 16) + "]")
    page.get_by_role("button", name="Send").click()
    output0 = page.locator('[data-output="OUTPUT0"] pre')
    output0.wait_for()
    assert output0.inner_text() == " ".join(str(i + 1) for i in range(16))
    assert page.locator('[data-output="OUTPUT1"] pre').inner_text() == " ".join(str(i - 1) for i in range(16))
    assert page.locator('[data-output="OUTPUT0"] h3 code').inner_text() == "INT32 [1, 16]"


def test_try_it_reports_bad_input(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "try/simple")
    page.locator('textarea[name="INPUT0"]').fill("1 2 3")
    page.get_by_role("button", name="Send").click()
    status = page.get_by_test_id("try-status")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=try-status]')?.textContent.startsWith('Error')"
    )
    # the server's words, which are Triton's (its test scripts compare the whole error body)
    assert status.inner_text() == "Error: Failed to parse 'data' field: shape does not match true shape"


def _pgm() -> bytes:
    """160 x 100, white, with a 40 x 20 dark box at (10, 20) and a 30 x 30 one at (90, 50)."""
    image = np.full((100, 160), 255, dtype=np.uint8)
    image[20:40, 10:50] = 0
    image[50:80, 90:120] = 30
    return b"P5\n160 100\n255\n" + image.tobytes()


def test_ocr_answer_is_drawn_over_the_uploaded_image(page: Any, console_server: RunningServer) -> None:
    _open(page, console_server, "try/ocr_boxes")
    page.locator('input[type="file"][data-input="IMAGE"]').set_input_files(
        {"name": "boxes.pgm", "mimeType": "image/x-portable-graymap", "buffer": _pgm()}
    )
    page.get_by_role("button", name="Send").click()
    overlay = page.get_by_test_id("ocr-overlay")
    overlay.wait_for()
    labels = overlay.locator("text")
    assert labels.all_text_contents() == ["40x20 1.00", "30x30 1.00"]
    image = page.locator("figure.ocr canvas").bounding_box()
    assert image["width"] > 0
    scale = image["width"] / 160
    for label, (x, y) in zip(labels.all(), [(10, 20), (90, 50)], strict=True):
        box = label.bounding_box()
        # each label sits over the image, at the top-left corner of its box
        assert image["x"] <= box["x"] and box["x"] + box["width"] <= image["x"] + image["width"] + 1
        assert abs(box["x"] - (image["x"] + x * scale)) < 6  # the label's white halo reaches past it
        assert image["y"] <= box["y"] and box["y"] + box["height"] <= image["y"] + y * scale + 6
    assert overlay.locator("polygon").count() == 2
    assert page.get_by_test_id("ocr-text").inner_text() == "40x20\n30x30"


def test_labels_follow_the_browser_language(browser: Any, console_server: RunningServer) -> None:
    context = browser.new_context(locale="zh-CN")
    try:
        page = context.new_page()
        page.goto(f"http://{console_server.url}/console#/models")
        page.locator('tr[data-model="simple"] .state').get_by_text("READY").wait_for(timeout=TIMEOUT_MS)
        assert page.locator("nav").inner_text().split() == ["模型", "实时", "试用"]
        assert page.locator("th").first.inner_text() == "模型"
        assert page.locator("html").get_attribute("lang") == "zh-CN"
    finally:
        context.close()


def test_model_control_obeys_the_restricted_api(browser: Any, tmp_path: Any) -> None:
    repository = console_repository(tmp_path / "repository")
    server = start_nereid(
        repository,
        tmp_path / "nereid.log",
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--http-restricted-api=model-repository:x-console-key=secret",
    )
    context = browser.new_context(locale="en-US")
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"http://{server.url}/console#/models")
        notice = page.get_by_test_id("models-notice")
        # the index itself is restricted: the page says which header it needs
        page.wait_for_function(
            "() => document.querySelector('[data-testid=models-notice]')?.textContent.length > 0"
        )
        assert "This API is restricted, expecting header 'x-console-key'" in notice.inner_text()
        page.locator(".settings summary").click()
        page.locator('input[name="header-name"]').fill("x-console-key")
        page.locator('input[name="header-value"]').fill("secret")
        page.get_by_role("button", name="Save").click()
        row = _row(page, "simple")
        row.locator(".state").get_by_text("READY").wait_for()
        row.locator('button[data-action="unload"]').click()
        row.locator(".state").get_by_text("UNAVAILABLE").wait_for()
    finally:
        context.close()
        stop(server.process)


def test_page_helpers(page: Any, console_server: RunningServer) -> None:
    """The page's arithmetic: latency quantiles from histogram deltas, box formats, tensor shapes."""
    _open(page, console_server, "models")
    results = page.evaluate(
        """async () => {
        const live = await import('/console/static/js/live.js');
        const overlay = await import('/console/static/js/overlay.js');
        const tensors = await import('/console/static/js/tensors.js');
        const before = [[100, 5], [200, 5], [400, 5], [null, 5]];
        const after = [[100, 5], [200, 55], [400, 105], [null, 106]];
        return {
          p50: live.quantile(0.5, before, after),
          p99: live.quantile(0.99, before, after),
          beyond: live.quantile(1.0, before, after),
          none: live.quantile(0.5, after, after),
          xyxy: overlay.boxPolygons([1, 2, 3, 4], [1, 4]),
          example: overlay.boxPolygons([0, 10, 20, 19, 24], [1, 5]),
          quad: overlay.boxPolygons([0, 0, 4, 0, 4, 2, 0, 2], [1, 4, 2]),
          perChar: overlay.boxLabels(['HI A'], null, 3),
          perBox: overlay.boxLabels(['one', 'two'], [0.5, 0.25], 2),
          shape: tensors.concreteShape([-1, 16], true, 16),
          free: tensors.concreteShape([-1, -1], false, 6),
          text: tensors.parseValues('[[1, 2], [3.5, -4]]', 'FP32'),
        };
      }"""
    )
    # of the 101 requests, 50 took 100-200 us and 50 took 200-400 us: rank 50.5 falls just into the second
    assert results["p50"] == pytest.approx(200 + 200 * 0.5 / 50)
    assert results["p99"] == pytest.approx(200 + 200 * (0.99 * 101 - 50) / 50)
    assert results["beyond"] == 400  # past the last bound: its lower edge
    assert results["none"] is None
    assert results["xyxy"] == [[[1, 2], [3, 2], [3, 4], [1, 4]]]
    assert results["example"] == [[[20, 10], [25, 10], [25, 20], [20, 20]]]  # line, top, left, bottom, right
    assert results["quad"] == [[[0, 0], [4, 0], [4, 2], [0, 2]]]
    assert results["perChar"] == ["H", "I", "A"]
    assert results["perBox"] == ["one 0.50", "two 0.25"]
    assert results["shape"] == [1, 16]
    assert results["free"] == [1, 6]
    assert results["text"] == [1, 2, 3.5, -4]
