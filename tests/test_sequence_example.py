"""examples/sequence_client.py against a real `nereid` serving examples/sequence_model_repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, start_nereid, stop


@pytest.mark.parametrize("model", ["accumulator", "accumulator_state"])
def test_the_sequence_client_keeps_interleaved_sequences_apart(tmp_path: Path, model: str) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "sequence_model_repository", repository)
    server = start_nereid(repository, tmp_path / "nereid.log")
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "sequence_client.py"),
                "--url",
                server.url,
                "--model",
                model,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "sequence 1001: inputs [1, 2, 3, 4] -> running totals [1, 3, 6, 10]",
            "sequence 2002: inputs [10, 20, 30] -> running totals [10, 30, 60]",
        ]
    finally:
        stop(server.process)
