"""A PyTorch image classifier served by Nereid, against calling the TorchScript module directly.

Builds ResNet-18 with random weights (written out here: no torchvision), scripts it with torch.jit and
serves it from `model.pt` with `platform: "pytorch_libtorch"`, max_batch_size and dynamic batching.
perf_analyzer sends one image per request at --concurrency (16). The direct figure is the module called
in this process under torch.inference_mode at each batch size, the best one kept. Prints images/s of
both and the ratio served/direct; the target is 0.85. Run it with the Python environment that has
Nereid and torch (`pip install 'nereid[torch]'`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import free_port, start_nereid, stop, wait_ready
from onnx_batching import stats_batch_size
from perf_analyzer import install_perf_analyzer, measure_model

MODEL = "resnet18"


class BasicBlock(torch.nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(outputs)
        self.conv2 = torch.nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(outputs)
        self.shortcut = torch.nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(inputs, outputs, 1, stride, bias=False), torch.nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(torch.nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        )
        layers = []
        width = 64
        for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(width, outputs, stride), BasicBlock(outputs, outputs, 1)]
            width = outputs
        self.layers = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(self.stem(x))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def config(size: int, max_batch: int, delay_us: int) -> str:
    return f"""platform: "pytorch_libtorch"
max_batch_size: {max_batch}
input [{{ name: "INPUT__0" data_type: TYPE_FP32 dims: [3, {size}, {size}] }}]
output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1000] }}]
instance_group [{{ kind: KIND_CPU count: 1 }}]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
"""


def direct(module: torch.jit.ScriptModule, size: int, batches: list[int], seconds: float) -> dict[int, float]:
    """Images/s of the module called here at each batch size (median of three timed windows)."""
    rates = {}
    for batch in batches:
        x = torch.randn(batch, 3, size, size)
        with torch.inference_mode():
            for _ in range(3):  # warm-up: the profiling executor optimizes after a few calls
                module(x)
            windows = []
            for _ in range(3):
                calls, start = 0, time.perf_counter()
                while time.perf_counter() - start < seconds / 3:
                    module(x)
                    calls += 1
                windows.append(calls * batch / (time.perf_counter() - start))
        rates[batch] = statistics.median(windows)
        print(f"  direct batch {batch:>3}: {rates[batch]:8.1f} images/s", flush=True)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--delay-us", type=int, default=2000, help="max_queue_delay_microseconds")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batches", default="1,2,4,8,16", help="batch sizes tried directly")
    parser.add_argument("--direct-seconds", type=float, default=6.0, help="timing per batch size")
    parser.add_argument("--interval-ms", type=int, default=8000, help="perf_analyzer measurement window")
    parser.add_argument("--max-trials", type=int, default=10)
    parser.add_argument("--stability", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="direct and served, alternating")
    args = parser.parse_args()

    torch.manual_seed(0)
    module = torch.jit.script(ResNet18().eval())
    binary, lib = install_perf_analyzer()
    with tempfile.TemporaryDirectory(prefix="nereid-bench-pytorch-") as tmp:
        folder = Path(tmp) / MODEL / "1"
        folder.mkdir(parents=True)
        module.save(str(folder / "model.pt"))
        (folder.parent / "config.pbtxt").write_text(config(args.size, args.max_batch_size, args.delay_us))
        print(
            f"ResNet-18, {args.size}x{args.size}, TorchScript, torch {torch.__version__}, "
            f"{torch.get_num_threads()} intra-op threads"
        )
        rates = direct(module, args.size, [int(b) for b in args.batches.split(",")], args.direct_seconds)
        best = max(rates, key=lambda b: rates[b])
        port = free_port()
        server = start_nereid(port, Path(tmp))
        ratios = []
        try:
            wait_ready(f"http://127.0.0.1:{port}/v2/models/{MODEL}/ready", server, timeout=120)
            for round_ in range(1, args.rounds + 1):
                # The machine is shared and noisy: each served figure is compared with a direct one
                # taken just before it.
                baseline = direct(module, args.size, [best], args.direct_seconds)[best]
                (row,) = measure_model(
                    binary,
                    lib,
                    MODEL,
                    ["-u", f"127.0.0.1:{port}"],
                    f"{args.concurrency}:{args.concurrency}",
                    args,
                )
                served = float(row["Inferences/Second"])
                ratios.append(served / baseline)
                print(
                    f"round {round_}: served at concurrency {args.concurrency}: {served:.1f} images/s "
                    f"(p50 {int(row['p50 latency']) / 1000:.0f} ms), direct at batch {best}: {baseline:.1f}, "
                    f"ratio {ratios[-1]:.2f}",
                    flush=True,
                )
            average = stats_batch_size(port, MODEL)
        finally:
            stop(server)
    print(f"average batch size served (inference_count / execution_count): {average:.1f}")
    ratio = statistics.median(ratios)
    print(
        f"median served / direct (batch {best}): {ratio:.2f}  target 0.85: {'met' if ratio >= 0.85 else 'not met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
