"""A server on the OpenAI example's models and this folder's test models, shared by the module's tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, RunningServer, start_nereid, stop

EXAMPLE = ROOT / "examples" / "openai"
TEST_MODELS = Path(__file__).resolve().parent / "models"


def openai_repository(target: Path) -> Path:
    """The example's repository (its ONNX model built) with the test models beside it."""
    shutil.copytree(EXAMPLE / "model_repository", target, ignore=shutil.ignore_patterns("model.onnx"))
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "build_embedder.py"),
            "--output",
            str(target / "tiny_embed" / "1" / "model.onnx"),
        ],
        check=True,
        capture_output=True,
    )
    for model in TEST_MODELS.iterdir():
        shutil.copytree(model, target / model.name)
    return target


@pytest.fixture(scope="module")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("openai")
    repository = openai_repository(base / "model_repository")
    server = start_nereid(repository, base / "nereid.log")
    server.repository = repository  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        stop(server.process)
