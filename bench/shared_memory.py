"""perf_analyzer with inputs and outputs in system shared memory vs binary tensors over HTTP, on a
1x3x224x224 FP32 identity model, on Nereid (ONNX Runtime) and on the real Triton (Python backend)."""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, ensure_modules, free_port, start_nereid, stop, wait_ready
from perf_analyzer import install_perf_analyzer, start_triton

sys.path.insert(0, str(ROOT))

SHAPE = [1, 3, 224, 224]
BYTE_SIZE = 4 * 3 * 224 * 224
CONFIG = (
    'name: "image"\n{backend}max_batch_size: 0\n'
    'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }} ]\n'
    'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] }} ]\n'
)
PYTHON_IDENTITY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


def onnx_repository(root: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "image",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, SHAPE)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (root / "image" / "1").mkdir(parents=True)
    onnx.save(model, root / "image" / "1" / "model.onnx")
    (root / "image" / "config.pbtxt").write_text(CONFIG.format(backend='platform: "onnxruntime_onnx"\n'))
    return root


def python_repository(root: Path) -> Path:
    (root / "image" / "1").mkdir(parents=True)
    (root / "image" / "1" / "model.py").write_text(PYTHON_IDENTITY)
    (root / "image" / "config.pbtxt").write_text(CONFIG.format(backend='backend: "python"\n'))
    return root


def measure(
    binary: Path, lib: Path, port: int, concurrency: str, shared_memory: bool, interval_ms: int
) -> list[dict[str, str]]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH")) if p)
    extra = (
        ["--shared-memory", "system", "--output-shared-memory-size", str(BYTE_SIZE)] if shared_memory else []
    )
    with tempfile.TemporaryDirectory(prefix="nereid-bench-") as tmp:
        csv_path = Path(tmp) / "results.csv"
        proc = subprocess.run(
            [
                str(binary), "-m", "image", "-u", f"127.0.0.1:{port}", "--concurrency-range", concurrency,
                "--measurement-interval", str(interval_ms), "--max-trials", "5", "--stability-percentage", "100",
                "-f", str(csv_path), *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
        )  # fmt: skip
        if proc.returncode != 0 or not csv_path.exists():
            raise RuntimeError(f"perf_analyzer failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        with open(csv_path, newline="") as fh:
            return sorted(csv.DictReader(fh), key=lambda r: int(r["Concurrency"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency-range", default="1:4:3", help="perf_analyzer start:end:step")
    parser.add_argument("--interval-ms", type=int, default=3000, help="measurement window")
    args = parser.parse_args()
    ensure_modules(("onnx", "onnx"))
    binary, lib = install_perf_analyzer()
    table: dict[tuple[str, str], dict[str, float]] = {}
    server = None
    try:
        with tempfile.TemporaryDirectory(prefix="nereid-bench-repo-") as tmp:
            for name in ("nereid", "triton"):
                port = free_port()
                if name == "nereid":
                    server = start_nereid(port, onnx_repository(Path(tmp) / "onnx"))
                else:
                    server = start_triton(port, python_repository(Path(tmp) / "python"))
                wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", server, timeout=120)
                for transport, shared in (("binary", False), ("shm", True)):
                    rows = measure(binary, lib, port, args.concurrency_range, shared, args.interval_ms)
                    table[(name, transport)] = {r["Concurrency"]: float(r["Inferences/Second"]) for r in rows}
                stop(server)
                server = None
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        stop(server)

    concurrencies = list(table[("nereid", "binary")])
    print(f"identity on FP32 {SHAPE} ({BYTE_SIZE} bytes in, the same out), perf_analyzer over HTTP, infer/s")
    print(f"  {'conc':>4} {'nereid bin':>11} {'nereid shm':>11} {'triton bin':>11} {'triton shm':>11} "
          f"{'shm ratio n/t':>14} {'bin ratio n/t':>14}")  # fmt: skip
    for c in concurrencies:
        nb, ns = table[("nereid", "binary")][c], table[("nereid", "shm")][c]
        tb, ts = table[("triton", "binary")][c], table[("triton", "shm")][c]
        print(f"  {c:>4} {nb:>11.1f} {ns:>11.1f} {tb:>11.1f} {ts:>11.1f} {ns / ts:>14.2f} {nb / tb:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
