"""What a new user meets in a first hour with a real `nereid` process: inputs past a type's range and the
texts of a start that fails."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, start_nereid, stop

PYTHON_MODELS = ROOT / "examples" / "python_model_repository"


def test_a_json_number_past_fp32s_range_is_infinity_without_a_warning_in_the_log(tmp_path: Path) -> None:
    server = start_nereid(
        PYTHON_MODELS, tmp_path / "nereid.log", "--model-control-mode=explicit", "--load-model=add_sub"
    )
    try:
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1e39] + [1.0] * 15},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            ]
        }
        request = urllib.request.Request(
            f"http://{server.url}/v2/models/add_sub/infer", json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            outputs = {o["name"]: o["data"] for o in json.loads(response.read())["outputs"]}
    finally:
        stop(server.process)
    # infinity, as Triton casts it (JSON has no infinity: Nereid writes null, README's differences)
    assert outputs["OUTPUT0"][:2] == [None, 2.0]
    assert "Warning" not in server.log() and "overflow" not in server.log()


def test_a_model_that_fails_to_initialize_fills_one_line_of_the_startup_table(tmp_path: Path) -> None:
    model = tmp_path / "models" / "failing"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    (model / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise ValueError('no weights')\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "nereid",
            f"--model-repository={model.parent}",
            "--http-port=0",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    table = [line for line in run.stderr.splitlines() if line.startswith("|")]
    assert len(table) == 2  # the header and the model's row, nothing of the traceback
    assert "UNAVAILABLE: ValueError: no weights (traceback in the log above)" in table[1]
    assert "model.py(3): initialize" in run.stderr  # the log line of the failure keeps it
