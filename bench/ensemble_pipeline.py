"""The OCR ensemble (the toy pipeline in tests/ocr_toy) under perf_analyzer, Nereid against the real Triton.

The real Triton here has only the Python backend, so both servers serve one repository where the
pipeline's two ONNX models are replaced by Python twins computing the same (bench/ocr_twins): five
Python steps chained by the ensemble `ocr`. Nereid also serves the example as it is (ONNX steps) for
a third column. Each request sends the same image file, a text PGM of two lines of text.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import ROOT, free_port, start_nereid, stop, wait_ready
from perf_analyzer import install_perf_analyzer, measure_model
from python_backend import _median_row, round_ratios, start_triton

OCR = ROOT / "tests" / "ocr_toy"
TWINS = Path(__file__).resolve().parent / "ocr_twins"
MODEL = "ocr"
TEXT = "HELLO NEREID\n2026"


def _example_module(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, OCR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(OCR))
    spec.loader.exec_module(module)
    return module


def python_repository(target: Path) -> Path:
    """The example with its ONNX steps swapped for their Python twins."""
    shutil.copytree(OCR / "model_repository", target)
    for name in ("text_detection", "text_recognition"):
        (target / name / "1" / "model.onnx").unlink()
        shutil.copy(TWINS / name / "model.py", target / name / "1" / "model.py")
        config = target / name / "config.pbtxt"
        config.write_text(config.read_text().replace('backend: "onnxruntime"', 'backend: "python"'))
    templates = _example_module("build_models").templates()
    np.save(target / "text_recognition" / "1" / "templates.npy", templates)
    return target


def input_data(path: Path) -> Path:
    """perf_analyzer's --input-data: the image as a text PGM (P2), so that JSON can carry it."""
    gray = _example_module("font").render(TEXT, 2)
    height, width = gray.shape
    pgm = f"P2\n{width} {height}\n255\n" + " ".join(str(v) for v in gray.reshape(-1)) + "\n"
    path.write_text(json.dumps({"data": [{"IMAGE": {"content": [pgm], "shape": [1]}}]}))
    return path


def check(port: int, image_json: Path) -> None:
    """One request by hand: the pipeline must read the text back before it is measured."""
    import tritonclient.http as httpclient

    pgm = json.loads(image_json.read_text())["data"][0]["IMAGE"]["content"][0].encode()
    with httpclient.InferenceServerClient(f"127.0.0.1:{port}") as client:
        tensor = httpclient.InferInput("IMAGE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([pgm], dtype=np.object_))
        text = client.infer(MODEL, [tensor]).as_numpy("TEXT")[0].decode()
    if text != TEXT:
        raise RuntimeError(f"the pipeline read {text!r}, not {TEXT!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", default="1,16", help="comma-separated concurrencies")
    parser.add_argument("--interval-ms", type=int, default=3000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument("--stability", type=int, default=100, help="perf_analyzer stability percent")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the servers, alternating")
    parser.add_argument("--nereid-only", action="store_true", help="skip the real Triton")
    parser.add_argument(
        "--nereid-flag", action="append", default=[], help="a flag for Nereid's command line (repeatable)"
    )
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    binary, lib = install_perf_analyzer()
    with tempfile.TemporaryDirectory(prefix="nereid-bench-ensemble-") as tmp:
        python_models = python_repository(Path(tmp) / "python")
        image_json = input_data(Path(tmp) / "image.json")

        # column -> (server start, repository)
        def nereid(port: int, repository: Path) -> subprocess.Popen[bytes]:
            return start_nereid(port, repository, None, *args.nereid_flag)

        columns: dict[str, tuple[Callable[[int, Path], subprocess.Popen[bytes]], Path]] = {
            "nereid": (nereid, python_models),
        }
        if not args.nereid_only:
            columns["triton"] = (start_triton, python_models)
        columns["nereid-onnx"] = (nereid, OCR / "model_repository")
        results: dict[tuple[str, int], list[dict[str, str]]] = {}
        for round_ in range(args.rounds):
            for column, (starter, repository) in columns.items():
                process = None
                try:
                    port = free_port()
                    process = starter(port, repository)
                    wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
                    check(port, image_json)
                    for concurrency in concurrencies:
                        target = ["-u", f"127.0.0.1:{port}", "--input-data", str(image_json)]
                        (row,) = measure_model(
                            binary, lib, MODEL, target, f"{concurrency}:{concurrency}:1", args
                        )
                        results.setdefault((column, concurrency), []).append(row)
                except (RuntimeError, subprocess.CalledProcessError) as exc:
                    print(f"FAILED on {column}: {exc}", file=sys.stderr)
                    return 1
                finally:
                    stop(process)
            line = "  ".join(
                f"{column} c{c}={float(results[(column, c)][-1]['Inferences/Second']):.1f}"
                for c in concurrencies
                for column in columns
            )
            print(f"round {round_ + 1}: {line}", flush=True)
    report(list(columns), concurrencies, results)
    return 0


def report(
    columns: list[str], concurrencies: list[int], results: dict[tuple[str, int], list[dict[str, str]]]
) -> None:
    print(f"ensemble {MODEL} (5 steps; nereid and triton: Python steps only), perf_analyzer, median round:")
    cells = (
        ["conc"]
        + [f"{c} inf/s|p50 ms" for c in columns]
        + (["nereid/triton", "per round"] if "triton" in columns else [])
    )
    print("  " + "  ".join(cells))
    for concurrency in concurrencies:
        medians = {column: _median_row(results[(column, concurrency)]) for column in columns}
        speed = {column: float(row["Inferences/Second"]) for column, row in medians.items()}
        cells = [f"{concurrency:>4}"] + [
            f"{speed[c]:.1f}|{int(medians[c]['p50 latency']) / 1000:.2f}".rjust(len(c) + 14) for c in columns
        ]
        if "triton" in columns:
            cells.append(f"{speed['nereid'] / speed['triton']:.2f}".rjust(13))
            cells.append(
                round_ratios(results[("nereid", concurrency)], results[("triton", concurrency)]).rjust(9)
            )
        print("  " + "  ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
