"""`nereid analyze` end to end on the add_sub example: a small search within a one-minute budget, its
output served as it is, Ctrl-C and resume, and the plain answers to bad input."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import tritonclient.http as httpclient

from tests.conftest import ROOT, start_nereid, stop

ADD_SUB = ROOT / "examples" / "python_model_repository" / "add_sub"
# A small space: two instance counts, the two execution modes, batching off (4 candidates; quick: 1).
SMALL = [
    "--instance-counts",
    "1,2",
    "--execution-modes",
    "process,thread",
    "--dynamic-batching",
    "off",
    "--concurrency",
    "1,4",
    "--window-ms",
    "300",
    "--max-windows",
    "6",
    "--load-generator",
    "builtin",
    "--budget-minutes",
    "1",
]


def command(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nereid",
        "analyze",
        "--model-repository",
        str(tmp_path / "repo"),
        "--output-repository",
        str(tmp_path / "out"),
        "--report-dir",
        str(tmp_path / "report"),
        *args,
    ]


def analyze(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(tmp_path, *args), capture_output=True, text=True, timeout=timeout)


def repository(tmp_path: Path) -> None:
    shutil.copytree(ADD_SUB, tmp_path / "repo" / "add_sub")


def interrupted_run(tmp_path: Path, *args: str) -> str:
    """A run stopped by SIGINT (Ctrl-C) once its first candidate is measured; its output."""
    process = subprocess.Popen(
        command(tmp_path, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines = []
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith("[1/4]"):
                process.send_signal(signal.SIGINT)
                break
        lines.append(process.communicate(timeout=120)[0])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, "".join(lines)
    return "".join(lines)


def test_interrupted_brute_search_resumes_and_writes_a_serving_config_and_a_report(tmp_path):
    repository(tmp_path)
    args = ["--model", "add_sub", "--search", "brute", "--latency-budget-ms", "1000", *SMALL]
    assert "the next run resumes" in interrupted_run(tmp_path, *args)
    interrupted = json.loads((tmp_path / "report" / "report.json").read_text())
    assert interrupted["interrupted"] and not interrupted["complete"] and interrupted["measured"] >= 1

    done = analyze(tmp_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming from" in done.stdout
    progress = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 4 and all("min left" in line for line in progress)
    assert "Best:" in done.stdout

    document = json.loads((tmp_path / "report" / "report.json").read_text())
    assert document["complete"] and document["measured"] == 4 and document["space_size"] == 4
    measurements = [m for c in document["candidates"] for m in c["measurements"]]
    assert len(measurements) == 8
    assert all(m["throughput"] > 0 and m["p99_ms"] >= m["p50_ms"] > 0 for m in measurements)
    assert all(m["cpu_us_per_infer"] > 0 and m["rss_mb"] > 10 for m in measurements)
    for name in ("report.html", "throughput_latency.png", "cpu.png", "memory.png"):
        assert (tmp_path / "report" / name).stat().st_size > 1000
    assert (tmp_path / "report" / "next_best" / "2" / "add_sub" / "config.pbtxt").exists()

    # the chosen config serves as it is, from the output repository
    config = (tmp_path / "out" / "add_sub" / "config.pbtxt").read_text()
    chosen = document["chosen"]
    assert f"count: {chosen.split('instances=')[1].split()[0]}" in config
    server = start_nereid(tmp_path / "out", tmp_path / "out.log")
    try:
        client = httpclient.InferenceServerClient(server.url)
        a, b = np.arange(16, dtype=np.float32).reshape(1, 16), np.ones((1, 16), np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        client.close()
    finally:
        stop(server.process)
    summary = json.loads((tmp_path / "out" / "nereid_analysis.json").read_text())
    assert summary["analyses"][0]["chosen"] == chosen


def test_bad_input_is_said_plainly(tmp_path):
    repository(tmp_path)
    done = analyze(
        tmp_path,
        "--model",
        "nope",
        "--model",
        "add_sub",
        "--latency-budget-ms",
        "0.001",
        "--instance-counts",
        "1",
        "--execution-modes",
        "thread",
        "--dynamic-batching",
        "off",
        "--concurrency",
        "1",
        "--window-ms",
        "200",
        "--max-windows",
        "4",
        "--load-generator",
        "builtin",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown model 'nope': the repository has add_sub" in done.stderr
    assert "No candidate meets the goal (p99 within 0.001 ms" in done.stdout
    assert "The closest: the models' own configs" in done.stdout
    assert not (tmp_path / "out" / "add_sub").exists()
    document = json.loads((tmp_path / "report" / "add_sub" / "report.json").read_text())
    assert document["chosen"] is None and document["candidates"][0]["closest"]["p99_ms"] > 0.001


ONE_INSTANCE_ONLY = """
import base64
import json


class OneInstanceOnly:
    def initialize(self, args):
        if json.loads(args["model_config"])["instance_group"][0]["count"] > 1:
            raise RuntimeError("this model runs one instance only")
"""


def test_a_candidate_that_fails_to_load_is_skipped_with_its_reason_over_grpc(tmp_path):
    repository(tmp_path)
    model = tmp_path / "repo" / "add_sub" / "1" / "model.py"
    text = model.read_text().replace("class TritonPythonModel:", "class TritonPythonModel(OneInstanceOnly):")
    model.write_text(ONE_INSTANCE_ONLY + text)
    done = analyze(
        tmp_path,
        "--model",
        "add_sub",
        "--search",
        "brute",
        "--instance-counts",
        "1,2",
        "--execution-modes",
        "process",
        "--dynamic-batching",
        "off",
        "--concurrency",
        "1",
        "--window-ms",
        "200",
        "--max-windows",
        "4",
        "--protocol",
        "grpc",
        "--load-generator",
        "builtin",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((tmp_path / "report" / "report.json").read_text())
    failed = [c for c in document["candidates"] if c["failure"]]
    assert [c["describe"] for c in failed] == ["add_sub.instances=2"], done.stdout + done.stderr
    assert "this model runs one instance only" in failed[0]["failure"]
    assert "skipped: model 'add_sub' failed to load" in done.stdout
    assert "count: 1" in (tmp_path / "out" / "add_sub" / "config.pbtxt").read_text()
    # measured over gRPC by the built-in load generator
    assert document["protocol"] == "grpc" and document["candidates"][0]["best"]["throughput"] > 0


def test_a_search_whose_first_candidates_all_fail_stops_and_says_why(tmp_path):
    repository(tmp_path)
    model = tmp_path / "repo" / "add_sub" / "1" / "model.py"
    model.write_text(
        model.read_text().replace(
            "        responses = []\n", "        raise pb_utils.TritonModelException('no answer today')\n", 1
        )
    )
    done = analyze(tmp_path, "--model", "add_sub", "--search", "brute", *SMALL)
    assert "stopped: the first 3 candidates all failed" in done.stdout, done.stdout + done.stderr
    assert "no answer today" in done.stdout
    document = json.loads((tmp_path / "report" / "report.json").read_text())
    assert len(document["candidates"]) == 3 and all(c["failure"] for c in document["candidates"])
    assert done.returncode != 0


def test_a_file_of_input_data_reaches_perf_analyzer_as_one_serialized_element(tmp_path):
    from nereid.analyze.run import _perf_analyzer_data

    image = tmp_path / "page.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(40)))
    settings = SimpleNamespace(input_data=str(image))
    target = SimpleNamespace(config={"input": [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}]})
    written = json.loads(Path(_perf_analyzer_data(settings, target, tmp_path)).read_text())
    element = written["data"][0]["IMAGE"]
    assert element["shape"] == [1]
    raw = base64.b64decode(element["b64"])
    assert int.from_bytes(raw[:4], "little") == len(raw) - 4 == 48 and raw[4:] == image.read_bytes()
