"""Warmup of Python models in real worker processes: before READY, counted in the statistics as Triton
counts it, failures fail the load."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from tests.backends.python.conftest import infer, manager_for

COUNTING = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        count = np.array([[self.executions]], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]) for _ in requests]
"""

FAILING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred")) for _ in requests]
"""

DECOUPLED = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = os.path.join(args["model_repository"], "executions")

    def execute(self, requests):
        with open(self.marker, "a") as marker:
            marker.write(f"{len(requests)}\\n")
        for request in requests:
            sender = request.get_response_sender()
            for value in (1, 2):
                count = np.array([[value]], dtype=np.int64)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
model_warmup [ {{
  name: "zero sample" batch_size: 2 count: 2
  inputs {{ key: "INPUT0" value {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }} }}
}} ]
"""


def _model(repository: Path, name: str, code: str, extra: str = "") -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    (repository / name / "1" / "model.py").write_text(textwrap.dedent(code))


def test_warmup_runs_before_ready_counts_as_in_triton_and_failures_fail_the_load(tmp_path: Path) -> None:
    _model(tmp_path, "counting", COUNTING, "dynamic_batching { }")
    _model(tmp_path, "failing", FAILING)
    _model(tmp_path, "decoupled", DECOUPLED, "model_transaction_policy { decoupled: true }")
    manager = manager_for(tmp_path)
    try:
        rows = {row["name"]: row for row in manager.index()}
        assert rows["counting"]["state"] == "READY" and rows["decoupled"]["state"] == "READY"
        assert rows["failing"]["state"] == "UNAVAILABLE"
        assert (
            "failed to run warmup sample 'zero sample': An Error Occurred; An Error Occurred; "
            in (rows["failing"]["reason"])
        )
        # Two warmup executions ran on the instance before the first request.
        outputs = infer(manager, "counting", {"INPUT0": np.zeros((1, 1), np.float32)})
        assert outputs["COUNT"].tolist() == [[3]]
        stats = manager.get("counting").statistics.to_json("counting", "1")
        # Triton 2.51 counts warmup: two executions of two requests each, then the request
        assert stats["inference_count"] == 5 and stats["execution_count"] == 3
        assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
            (1, 1),
            (2, 2),
        ]
        # The decoupled model's responses were read to their end, twice, each a batch of two.
        assert (tmp_path / "decoupled" / "executions").read_text().split() == ["2", "2"]
    finally:
        manager.stop()
