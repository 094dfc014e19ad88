"""Triton's model-control client examples, run unchanged against Nereid, and the load failures they match
on: every one opens with Triton's "failed to load '<model>', ", with Triton's status codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES, ROOT, start_nereid, stop

CLIENT_EXAMPLES = Path(__file__).parent / "triton_client_examples"


def _repository(tmp_path: Path, size: int) -> Path:
    """`size` models, `simple` among them (max_batch_size 8): the examples count the repository index."""
    repository = tmp_path / "repo"
    folders = [*sorted(EXAMPLES.iterdir()), *sorted((ROOT / "examples/python_model_repository").iterdir())]
    folders += sorted((ROOT / "examples/sequence_model_repository").iterdir())
    for folder in folders[:size]:
        shutil.copytree(folder, repository / folder.name)
    assert len(list(repository.iterdir())) == size
    return repository


@pytest.mark.parametrize(
    ("script", "models"), [("simple_http_model_control.py", 7), ("simple_grpc_model_control.py", 8)]
)
def test_tritons_model_control_examples_pass(tmp_path: Path, script: str, models: int) -> None:
    server = start_nereid(
        _repository(tmp_path, models), tmp_path / "nereid.log", "--model-control-mode=explicit", grpc=True
    )
    try:
        url = server.grpc_url if "grpc" in script else server.url.removeprefix("http://")
        run = subprocess.run(
            [sys.executable, str(CLIENT_EXAMPLES / script), "-u", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "PASS: model control" in run.stdout
    finally:
        stop(server.process)


def test_every_load_failure_opens_with_tritons_words_and_status(tmp_path: Path) -> None:
    repository = _repository(tmp_path, 1)
    broken = repository / "broken"
    shutil.copytree(ROOT / "examples/python_model_repository/add_sub", broken)
    config = broken / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', 'name: "broken"'))
    (broken / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise ValueError('boom')\n"
    )
    server = start_nereid(repository, tmp_path / "nereid.log", "--model-control-mode=explicit", grpc=True)
    try:
        http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        for client, internal, invalid in ((http, "500", "400"), (grpc, "INTERNAL", "INVALID_ARGUMENT")):
            # a 'config' parameter that is not JSON: Triton's poll failure, INTERNAL
            with pytest.raises(InferenceServerException) as not_json:
                client.load_model("simple", config="{bad")
            assert not_json.value.message().startswith(
                "failed to load 'simple', failed to poll from model repository: model 'simple': the 'config' "
                "parameter is not valid JSON"
            )
            assert not_json.value.status().endswith(internal)
            # a version that fails: Triton's "load failed for model" after the same opening, INVALID_ARGUMENT
            with pytest.raises(InferenceServerException) as failed:
                client.load_model("broken")
            assert failed.value.message().startswith(
                "failed to load 'broken', load failed for model 'broken': version 1 is at UNAVAILABLE state: "
            )
            assert failed.value.status().endswith(invalid)
            # no such model
            with pytest.raises(InferenceServerException) as missing:
                client.load_model("nowhere")
            assert missing.value.message().startswith(
                "failed to load 'nowhere', failed to poll from model repository"
            )
            assert missing.value.status().endswith(internal)
            # JSON that is no ModelConfig: a poll failure too, as in Triton
            with pytest.raises(InferenceServerException) as not_config:
                client.load_model("simple", config=json.dumps({"max_batch_size": "abc"}))
            assert not_config.value.message().startswith(
                "failed to load 'simple', failed to poll from model repository: failed to parse model "
                "configuration JSON: Failed to parse max_batch_size field"
            )
            assert not_config.value.status().endswith(internal)
            # a config override that is JSON but names another model, and an invalid name
            with pytest.raises(InferenceServerException) as other:
                client.load_model("simple", config=json.dumps({"name": "other"}))
            assert other.value.message().startswith("failed to load 'simple', ")
            with pytest.raises(InferenceServerException) as dots:
                client.load_model("..")
            assert dots.value.message().startswith("failed to load '..', ")
            assert dots.value.status().endswith(invalid)
    finally:
        stop(server.process)
