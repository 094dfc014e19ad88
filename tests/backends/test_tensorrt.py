"""TensorRT plans: without a GPU (or without the tensorrt package) the model fails to load, saying why."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.backends.serving import failure, model_dir, serving

CONFIG = """
platform: "tensorrt_plan"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
"""


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda(), reason="on a CUDA host the plan is judged by TensorRT itself")
def test_a_plan_on_a_host_without_gpu_fails_to_load_clearly(tmp_path: Path) -> None:
    (model_dir(tmp_path, "plan", CONFIG) / "model.plan").write_bytes(b"not built on this host")
    (model_dir(tmp_path, "detected", None) / "model.plan").write_bytes(b"not built on this host")
    with serving(tmp_path) as engine:
        for name in ("plan", "detected"):
            reason = failure(engine, name)
            if importlib.util.find_spec("tensorrt") is None:
                assert reason == (
                    "backend 'tensorrt' needs a package that is not installed (tensorrt): "
                    "pip install 'nereid[tensorrt]'"
                )
            else:
                assert "TensorRT plans need a CUDA GPU, and this host has none" in reason
