"""Triton's Model Analyzer profiles Nereid unchanged: local launch mode, CPU metrics, a small brute
search, its summary report, and the best config it writes served by Nereid.

Marked slow: Model Analyzer starts and stops the server for every config and measures each one with
perf_analyzer in its own stability loop, minutes even for this small search (more on a busy machine),
too long for CI's budget. Run it with `-m slow`, with Model Analyzer installed in a virtual environment
of its own (its pins clash with Nereid's) and both tools named:
`NEREID_MODEL_ANALYZER=~/ma/bin/model-analyzer NEREID_PERF_ANALYZER=... pytest -m slow tests/analyze`.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import ROOT, free_ports, start_nereid, stop

ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"


def tool(variable: str) -> str:
    path = os.environ.get(variable, "")
    if not path or not Path(path).exists():
        pytest.fail(f"set {variable} to the tool's path to run this test")
    return path


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("launch_mode", ["local", "remote"])
def test_model_analyzer_profiles_nereid_and_its_best_config_serves(tmp_path, launch_mode):
    analyzer, perf_analyzer = tool("NEREID_MODEL_ANALYZER"), tool("NEREID_PERF_ANALYZER")
    shutil.copytree(ADD_SUB, tmp_path / "repo" / "add_sub")
    http, grpc, metrics = free_ports(3)
    nereid = Path(sys.executable).parent / "nereid"
    remote = None
    if launch_mode == "remote":  # a Nereid already running, in explicit mode, with its metrics on
        remote = start_nereid(
            tmp_path / "repo",
            tmp_path / "remote.log",
            "--model-control-mode=explicit",
            "--allow-metrics=true",
            f"--metrics-port={metrics}",
            grpc=True,
        )
        http, grpc = remote.http_port, remote.grpc_port
    common = ["--checkpoint-directory", str(tmp_path / "ckpt"), "--export-path", str(tmp_path / "export")]
    (tmp_path / "export").mkdir()
    (tmp_path / "config.yaml").write_text(
        # a busy machine fails perf_analyzer's default stability rule (docs/model_analyzer.md)
        "perf_analyzer_flags:\n  measurement-mode: time_windows\n  measurement-interval: 2000\n"
        "  stability-percentage: 50\n"
    )
    try:
        profile = subprocess.run(
            [
                analyzer,
                "profile",
                "-f",
                str(tmp_path / "config.yaml"),
                "--model-repository",
                str(tmp_path / "repo"),
                "--profile-models",
                "add_sub",
                f"--triton-launch-mode={launch_mode}",
                f"--triton-server-path={nereid}",
                "--triton-http-endpoint",
                f"localhost:{http}",
                "--triton-grpc-endpoint",
                f"localhost:{grpc}",
                "--triton-metrics-url",
                f"http://localhost:{metrics}/metrics",
                f"--perf-analyzer-path={perf_analyzer}",
                "--collect-cpu-metrics",
                "--output-model-repository-path",
                str(tmp_path / "out"),
                "--override-output-model-repository",
                "--run-config-search-max-instance-count",
                "1",
                "--run-config-search-max-model-batch-size",
                "2",
                "--run-config-search-max-concurrency",
                "2",
                *common,
            ],
            capture_output=True,
            text=True,
            timeout=1500,
        )
    finally:
        if remote is not None:
            stop(remote.process)
    log = profile.stdout + profile.stderr
    assert profile.returncode == 0, log
    assert "no valid requests recorded" not in log
    assert "Profile complete" in log or "Saved checkpoint" in log, log

    report = subprocess.run(
        [analyzer, "report", "--report-model-configs", "add_sub_config_default", *common],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    assert (tmp_path / "export" / "reports" / "summaries" / "add_sub").is_dir()

    # Model Analyzer's best config (the first row of its results), a model folder: it serves on Nereid
    with open(tmp_path / "export" / "results" / "metrics-model-inference.csv") as results:
        best = next(csv.DictReader(results))["Model Config Path"]
    # its config of the model (local mode: a model folder whose versions link to the default's; remote
    # mode: the config alone), put in the model's folder
    serving = tmp_path / "serving"
    shutil.copytree(ADD_SUB, serving / "add_sub")
    config = (tmp_path / "out" / best / "config.pbtxt").read_text()
    (serving / "add_sub" / "config.pbtxt").write_text(config.replace(f'"{best}"', '"add_sub"'))
    server = start_nereid(serving, tmp_path / "serving.log")
    try:
        client = httpclient.InferenceServerClient(server.url)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
        client.close()
    finally:
        stop(server.process)
