"""A compute-bound ONNX model with dynamic batching, against ONNX Runtime called directly.

Builds a small CNN (3x48x48 images, four 3x3 convolutions with ReLU, global pooling, 10 classes; a few
milliseconds per batch of 8 on a small CPU) with the `onnx` package, then:

1. calls ONNX Runtime directly in this process, at batch sizes 1 to 64, and keeps the best rows/s;
2. serves it from Nereid (max_batch_size 64, `dynamic_batching { }`, one instance) and drives it with
   perf_analyzer over HTTP at --concurrency (32), one row per request;
3. prints Nereid's rows/s as a fraction of the direct figure (target: 0.85), the average batch size
   Nereid formed, and the peak resident memory of the server with its worker processes.

Peak memory is also measured for the real Triton and Nereid serving the same Python `add_sub`
repository with `dynamic_batching` (this Triton build has no ONNX Runtime backend, so it cannot
load the CNN).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from _common import ROOT, ensure_modules, free_port, start, start_nereid, stop, wait_ready
from perf_analyzer import install_perf_analyzer, measure_model

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_command  # noqa: E402

TARGET = 0.85
CHANNELS, SIZE, CLASSES = 3, 48, 10
CONVS = ((32, 1), (64, 2), (64, 2), (128, 2))  # (output channels, stride) of each 3x3 convolution
BATCHES = (1, 8, 16, 32, 64)
ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"


def build_cnn(path: Path) -> None:
    """Convolutions reuse their weights across the image, so the model is compute-bound at any batch size
    (an MLP of this cost would be bound by reading its weights, and favour the largest batches)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights = [], []
    channels, current = CHANNELS, "INPUT0"
    for index, (out_channels, stride) in enumerate(CONVS):
        w = rng.standard_normal((out_channels, channels, 3, 3)) / np.sqrt(channels * 9)
        weights += [
            numpy_helper.from_array(w.astype(np.float32), f"w{index}"),
            numpy_helper.from_array(np.zeros(out_channels, np.float32), f"b{index}"),
        ]
        conv = helper.make_node(
            "Conv",
            [current, f"w{index}", f"b{index}"],
            [f"conv{index}"],
            pads=[1, 1, 1, 1],
            strides=[stride] * 2,
        )
        nodes += [conv, helper.make_node("Relu", [f"conv{index}"], [f"relu{index}"])]
        channels, current = out_channels, f"relu{index}"
    weights += [
        numpy_helper.from_array((rng.standard_normal((channels, CLASSES)) / 8).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc_b"),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"]),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", CHANNELS, SIZE, SIZE])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", CLASSES])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def repository(root: Path) -> Path:
    (root / "cnn" / "1").mkdir(parents=True)
    build_cnn(root / "cnn" / "1" / "model.onnx")
    (root / "cnn" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\n'
        "max_batch_size: 64\n"
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {CHANNELS}, {SIZE}, {SIZE} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        "dynamic_batching { }\n"
    )
    return root


def direct_rows_per_second(model: Path, seconds: float) -> dict[int, float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as Nereid's sessions
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    rates = {}
    for batch in BATCHES:
        feed = {
            "INPUT0": np.random.default_rng(1)
            .standard_normal((batch, CHANNELS, SIZE, SIZE))
            .astype(np.float32)
        }
        session.run(None, feed)
        runs, start_time = 0, time.perf_counter()
        while time.perf_counter() - start_time < seconds:
            session.run(None, feed)
            runs += 1
        rates[batch] = runs * batch / (time.perf_counter() - start_time)
    return rates


def peak_rss_bytes(pid: int) -> int:
    """Peak resident memory (VmHWM) of a process and all its descendants, summed."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
        pending += [int(c) for c in children]
    return total


def stats_batch_size(port: int, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    return stats["inference_count"] / max(1, stats["execution_count"])


def python_repository_rss(tool: tuple[Path, Path], args: argparse.Namespace, tmp: Path) -> dict[str, int]:
    root = tmp / "python_repository"
    shutil.copytree(ADD_SUB, root / "add_sub")
    config = root / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + "dynamic_batching { }\n")
    peaks = {}
    for name in ("nereid", "triton"):
        port = free_port()
        if name == "nereid":
            process = start_nereid(port, root)
        else:
            command, env = triton_command(root, port)
            process = start(command, "triton", env)
        try:
            wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout=120)
            measure_model(
                *tool,
                "add_sub",
                ["-u", f"127.0.0.1:{port}"],
                f"{args.concurrency}:{args.concurrency}:1",
                args,
            )
            peaks[name] = peak_rss_bytes(process.pid)
        finally:
            stop(process)
    return peaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--direct-seconds", type=float, default=3.0, help="per batch size")
    parser.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=5)
    parser.add_argument("--stability", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="direct and Nereid, alternating")
    args = parser.parse_args()
    ensure_modules(("onnx", "onnx"))
    tool = install_perf_analyzer()
    directs, served, batches, peaks = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="nereid-bench-onnx-") as tmp_name:
        tmp = Path(tmp_name)
        repo = repository(tmp / "repository")
        for round_ in range(args.rounds):
            rates = direct_rows_per_second(repo / "cnn" / "1" / "model.onnx", args.direct_seconds)
            best = max(rates, key=lambda b: rates[b])
            directs.append(rates[best])
            port = free_port()
            process = start_nereid(port, repo)
            try:
                wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", process)
                (row,) = measure_model(
                    *tool,
                    "cnn",
                    ["-u", f"127.0.0.1:{port}"],
                    f"{args.concurrency}:{args.concurrency}:1",
                    args,
                )
                served.append(float(row["Inferences/Second"]))
                batches.append(stats_batch_size(port, "cnn"))
                peaks.append(peak_rss_bytes(process.pid))
            finally:
                stop(process)
            per_batch = "  ".join(f"b{b}={r:.0f}" for b, r in rates.items())
            print(
                f"round {round_ + 1}: direct rows/s {per_batch} (best b{best}); "
                f"nereid c{args.concurrency} {served[-1]:.0f} infer/s, average batch {batches[-1]:.1f}",
                flush=True,
            )
        python_peaks = python_repository_rss(tool, args, tmp)
    direct, nereid = float(np.median(directs)), float(np.median(served))
    ms_per_8 = 8 / max(directs) * 1000
    print(f"\nCNN on {CHANNELS}x{SIZE}x{SIZE} images: about {ms_per_8:.2f} ms per batch of 8 called directly")
    print(f"  direct ONNX Runtime, best batch size: {direct:.0f} rows/s (median of {args.rounds})")
    print(f"  Nereid, dynamic batching, concurrency {args.concurrency}: {nereid:.0f} rows/s (median)")
    ratio = nereid / direct
    print(f"  nereid/direct {ratio:.2f}  target {TARGET:.2f} {'met' if ratio >= TARGET else 'NOT met'}")
    print(f"  average batch size formed by Nereid: {np.mean(batches):.1f}")
    print(f"  peak RSS, Nereid serving the CNN (server and workers): {max(peaks) / 2**20:.0f} MiB")
    print(
        "  peak RSS serving the Python add_sub repository with dynamic batching: "
        f"Nereid {python_peaks['nereid'] / 2**20:.0f} MiB, Triton {python_peaks['triton'] / 2**20:.0f} MiB "
        "(server and worker processes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
