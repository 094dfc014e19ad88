"""The OCR example (examples/ocr, PP-OCR models) served by Nereid, against the same models' reference
pipeline called directly in this process, and against the real Triton running the same steps.

    python bench/ocr.py [--concurrency 1,4,16] [--rounds 2] [--seconds 8] [--no-triton]

Columns (every one reads the same pages, drawn by examples/ocr/render.py: two lines of English, two of
Chinese, taken in turn):
- `direct`: rapidocr_onnxruntime's RapidOCR in this process, called by `concurrency` threads;
- `steps in process`: the example's own steps and ONNX Runtime sessions (as Nereid's backend sets them up)
  called in this process, one page per call, by `concurrency` threads: a page's cost with no server and no
  batching across pages;
- `nereid ocr`, `nereid ocr_bls`: the example as it is, ONNX models on Nereid's ONNX Runtime backend;
- `twin nereid ...`, `twin triton ...`: the real Triton build here has no ONNX Runtime backend, so both
  servers serve a twin repository where the three ONNX models are Python models running ONNX Runtime
  in model.py (bench/ocr_onnx_twin), with the same batching settings.

Each window is a closed loop of `concurrency` clients (HTTP), measured after the first answer for
`--seconds`, or longer until `concurrency` pages have been read. Reported per column: throughput (pages/s), latency (p50 and mean, ms), server CPU time per
page (every process of the server, from /proc, over the window; for `direct`, this process), and the
recogniser's batches (crops per execution, pages per execution). Each round measures every column in
turn, the order reversed on alternate rounds; the tables give the median round and the per-round range.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _common import ROOT, free_port, start, start_nereid, stop, wait_ready

OCR = ROOT / "examples" / "ocr"
TWIN = Path(__file__).resolve().parent / "ocr_onnx_twin" / "model.py"
ONNX_MODELS = ("text_detection", "text_direction", "text_recognition")
PAGES = [
    (["The quick brown fox", "jumps over 13 lazy dogs"], "serif"),
    (["文字识别模型", "推理服务器"], "cjk"),
]
# what the Python steps import, in the real Triton's environment
# (pytriton needs numpy 1; OpenCV's last builds for it are 4.10)
TRITON_PACKAGES = ["numpy<2", "onnxruntime", "pillow", "opencv-python-headless<4.11", "pyclipper", "shapely"]


def _example(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"ocr_{name}", OCR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def twin_repository(target: Path) -> Path:
    """The example with its ONNX models served by Python models that run ONNX Runtime themselves."""
    shutil.copytree(OCR / "model_repository", target)
    for name in ONNX_MODELS:
        shutil.copy(TWIN, target / name / "1" / "model.py")
        config = target / name / "config.pbtxt"
        config.write_text(config.read_text().replace('backend: "onnxruntime"', 'backend: "python"'))
    return target


def start_triton(port: int, repository: Path) -> subprocess.Popen[bytes]:
    sys.path.insert(0, str(ROOT))
    from tests.differential.real_triton import triton_command

    command, env = triton_command(repository, port)
    python = Path(env["PATH"].split(os.pathsep)[0]) / "python"
    probe = [str(python), "-c", "import onnxruntime, PIL, cv2, pyclipper, shapely"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TRITON_PACKAGES], check=True)
    return start(command, "triton", env)


def cpu_seconds(pid: int) -> float:
    """User and system time of a process and all its descendants, as /proc has it now."""
    tick = os.sysconf("SC_CLK_TCK")
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
        pending += [int(c) for c in children]
    return total


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def recogniser_stats(port: int) -> tuple[int, int, int]:
    """(pages, crops, executions) the recogniser has counted."""
    url = f"http://127.0.0.1:{port}/v2/models/text_recognition/stats"
    with urllib.request.urlopen(url, timeout=60) as answer:
        stats = json.load(answer)["model_stats"][0]
    pages = int(stats["inference_stats"]["success"]["count"])
    return pages, int(stats["inference_count"]), int(stats["execution_count"])


@dataclass(frozen=True)
class Window:
    throughput: float  # pages per second
    p50_ms: float
    mean_ms: float
    cpu_us: float  # server CPU per page
    crops_per_execution: float | None
    pages_per_execution: float | None


@dataclass(frozen=True)
class Column:
    name: str
    caller: Callable[[], Callable[[bytes], list[str]]]  # a per-thread reader of one page
    cpu: Callable[[], float]
    port: int | None  # where the recogniser's statistics are, for server columns


def measure(column: Column, concurrency: int, seconds: float, images: list[bytes]) -> Window:
    done: list[tuple[float, float]] = []  # (finished at, latency)
    lock, stopping, first = threading.Lock(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            read = column.caller()
            index = offset
            while not stopping.is_set():
                began = time.perf_counter()
                read(images[index % len(images)])
                ended = time.perf_counter()
                with lock:
                    done.append((ended, ended - began))
                first.set()
                index += 1
        except BaseException as exc:  # reported below, the window is void
            errors.append(exc)
            first.set()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    first.wait(timeout=120)
    began, cpu_before = time.perf_counter(), column.cpu()
    stats_before = recogniser_stats(column.port) if column.port else None
    # At least `seconds`, and long enough for `concurrency` pages: answers come in bursts when pages
    # share a detector batch, and a loaded machine may take longer than a window for one page.
    while time.perf_counter() - began < seconds or _count_since(done, lock, began) < concurrency:
        if time.perf_counter() - began > 20 * seconds or errors:
            break
        time.sleep(0.2)
    ended, cpu_after = time.perf_counter(), column.cpu()
    stats_after = recogniser_stats(column.port) if column.port else None
    stopping.set()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{column.name}: {errors[0]!r}")
    latencies = [latency for at, latency in done if began <= at <= ended]
    if not latencies:
        raise RuntimeError(f"{column.name}: no page was read within {seconds} s; try a longer --seconds")
    crops = pages = None
    if stats_before and stats_after:
        page_count, crop_count, executions = (a - b for a, b in zip(stats_after, stats_before, strict=True))
        crops = crop_count / max(1, executions)
        pages = page_count / max(1, executions)
    return Window(
        throughput=len(latencies) / (ended - began),
        p50_ms=float(np.percentile(latencies, 50)) * 1000,
        mean_ms=statistics.fmean(latencies) * 1000,
        cpu_us=(cpu_after - cpu_before) / len(latencies) * 1e6,
        crops_per_execution=crops,
        pages_per_execution=pages,
    )


def _count_since(done: list[tuple[float, float]], lock: threading.Lock, began: float) -> int:
    with lock:
        return sum(1 for at, _ in done if at >= began)


def steps_reader() -> Callable[[], Callable[[bytes], list[str]]]:
    """The example's steps and ONNX models called in this process, one page at a time, with the session
    options Nereid's ONNX Runtime backend gives them: what a page costs with no server and no batching
    across pages (the CPU any server spends at least, less what joining pages' crops saves)."""
    sys.path.insert(0, str(ROOT))
    import onnxruntime as ort

    from nereid.backends.onnxruntime import _session_options
    from nereid.backends.python import inprocess
    from nereid.model_config.parse import read_config

    inprocess.install(None)  # the steps import triton_python_backend_utils
    repository = OCR / "model_repository"
    bls = importlib.util.spec_from_file_location("ocr_steps_bls", repository / "ocr_bls" / "1" / "model.py")
    assert bls is not None and bls.loader is not None
    module = importlib.util.module_from_spec(bls)
    bls.loader.exec_module(module)
    sessions = {}
    for name in ONNX_MODELS:
        config, _ = read_config(repository / name)
        model_file = str(repository / name / "1" / "model.onnx")
        sessions[name] = ort.InferenceSession(
            model_file, _session_options(config), providers=["CPUExecutionProvider"]
        )

    def run(model: str, name: str, array: np.ndarray, output: str) -> np.ndarray:
        return sessions[model].run([output], {name: array})[0]

    module._infer = run  # the BLS calls, made on the sessions directly
    pipeline = module.TritonPythonModel()
    pipeline.initialize({"model_repository": str(repository / "ocr_bls")})

    def caller() -> Callable[[bytes], list[str]]:
        return lambda image: [
            str(t, "utf-8") if isinstance(t, bytes) else str(t) for t in pipeline.read(image)[0]
        ]

    return caller


def server_reader(port: int, model: str) -> Callable[[], Callable[[bytes], list[str]]]:
    client_module = _example("client")

    def caller() -> Callable[[bytes], list[str]]:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=600)
        return lambda image: [t for t, _, _ in client_module.read_text(client, model, image)]

    return caller


def check(column: Column, images: list[bytes], expected: list[list[str]]) -> None:
    """Before it is measured, every column must read the pages."""
    read = column.caller()
    for image, lines in zip(images, expected, strict=True):
        got = [t.replace(" ", "") for t in read(image)]
        if got != [line.replace(" ", "") for line in lines]:
            raise RuntimeError(f"{column.name} read {got}, not {lines}")


def refusal(port: int, model: str) -> str:
    """The HTTP status a file that is not an image gets."""
    body = json.dumps({"inputs": [{"name": "IMAGE", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", body.encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return str(answer.status)
    except urllib.error.HTTPError as error:
        return str(error.code)


def report(
    results: dict[tuple[str, int], list[Window]], columns: list[str], concurrencies: list[int]
) -> None:
    def median(name: str, c: int, field: str) -> float:
        return statistics.median(getattr(w, field) for w in results[(name, c)])

    print("\nOCR pipeline, median round (range over rounds); CPU: server processes, per page")
    header = f"  {'column':<22}{'conc':>5}{'pages/s':>9}{'range':>13}{'p50 ms':>9}{'mean ms':>9}"
    print(header + f"{'CPU us/page':>13}{'crops/exec':>12}{'pages/exec':>12}")
    for c in concurrencies:
        for name in columns:
            windows = results[(name, c)]
            speeds = sorted(w.throughput for w in windows)
            batch = [w for w in windows if w.crops_per_execution is not None]
            crops = f"{statistics.median(w.crops_per_execution for w in batch):.2f}" if batch else "-"
            pages = f"{statistics.median(w.pages_per_execution for w in batch):.2f}" if batch else "-"
            print(
                f"  {name:<22}{c:>5}{median(name, c, 'throughput'):>9.2f}"
                f"{f'{speeds[0]:.2f}-{speeds[-1]:.2f}':>13}{median(name, c, 'p50_ms'):>9.0f}"
                f"{median(name, c, 'mean_ms'):>9.0f}{median(name, c, 'cpu_us'):>13.0f}{crops:>12}{pages:>12}"
            )
    print("\ntargets:")
    low, high = min(concurrencies), max(concurrencies)
    for model in ("ocr", "ocr_bls"):
        ours = f"nereid {model}"
        if ("direct", low) in results and (ours, low) in results:
            ratio = median(ours, low, "mean_ms") / median("direct", low, "mean_ms")
            print(f"  {ours} latency at {low} / direct: {ratio:.2f} (target <= 1.10)")
        if ("direct", high) in results and (ours, high) in results:
            ratio = median(ours, high, "throughput") / median("direct", high, "throughput")
            print(f"  {ours} throughput at {high} / direct: {ratio:.2f} (target >= 1.2)")
        triton = f"twin triton {model}"
        if (triton, high) in results and ("steps in process", high) in results:
            bound = median(triton, high, "cpu_us") / median("steps in process", high, "cpu_us")
            print(
                f"  {triton} CPU per page / steps in process at {high}: {bound:.2f}"
                " (a server with no cost of its own, on a saturated host, could read that many times Triton's pages/s)"
            )
        if (triton, high) in results:
            for mine in (ours, f"twin nereid {model}"):
                ratio = median(mine, high, "throughput") / median(triton, high, "throughput")
                cpu = median(mine, high, "cpu_us") / median(triton, high, "cpu_us")
                print(
                    f"  {mine} throughput at {high} / {triton}: {ratio:.2f} (target >= 1.5);"
                    f" CPU per page {cpu:.2f} of Triton's"
                )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrencies")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every column, alternating")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of a measurement window")
    parser.add_argument("--no-triton", action="store_true", help="skip the real Triton")
    parser.add_argument("--no-twin", action="store_true", help="skip the twin repository (and Triton)")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    _example("prepare").prepare(OCR / "model_repository")
    render = _example("render").render
    images = [render(lines, font) for lines, font in PAGES]

    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    columns = [
        Column("direct", lambda: lambda image: [r[1] for r in engine(image)[0]], own_cpu_seconds, None),
        Column("steps in process", steps_reader(), own_cpu_seconds, None),
    ]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="nereid-bench-ocr-") as tmp:
            servers = [("nereid", start_nereid, OCR / "model_repository")]
            if not args.no_twin:
                twin = twin_repository(Path(tmp) / "twin")
                servers.append(("twin nereid", start_nereid, twin))
                if not args.no_triton:
                    servers.append(("twin triton", start_triton, twin))
            for label, starter, repository in servers:
                port = free_port()
                process = starter(port, repository)
                processes.append(process)
                wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=300)
                for model in ("ocr", "ocr_bls"):
                    pid = process.pid
                    columns.append(
                        Column(
                            f"{label} {model}", server_reader(port, model), lambda p=pid: cpu_seconds(p), port
                        )
                    )
                    print(f"{label} {model}: not an image -> HTTP {refusal(port, model)}", flush=True)
            for column in columns:
                check(column, images, [lines for lines, _ in PAGES])
            results: dict[tuple[str, int], list[Window]] = {}
            for round_ in range(args.rounds):
                order = columns if round_ % 2 == 0 else columns[::-1]
                for c in concurrencies:
                    for column in order:
                        window = measure(column, c, args.seconds, images)
                        results.setdefault((column.name, c), []).append(window)
                        print(
                            f"round {round_ + 1} c{c} {column.name}: {window.throughput:.2f} pages/s, "
                            f"p50 {window.p50_ms:.0f} ms, {window.cpu_us:.0f} us CPU/page",
                            flush=True,
                        )
    finally:
        for process in processes:
            stop(process)
    report(results, [c.name for c in columns], concurrencies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
