"""Python models on the real Triton and on Nereid, both serving one and the same repository.

Every case of cases.json runs again here, now against Python models on both sides, and
python_cases.json adds what belongs to the Python backend: model.py answers, auto-complete, errors a
model raises or returns, and a worker that dies.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, TRITON_EXAMPLES, execution_mode_flags
from tests.differential.conftest import HERE, server_pair
from tests.differential.test_differential import HTTP_CASES, compare

PYTHON_CASES: list[dict[str, Any]] = json.loads((HERE / "python_cases.json").read_text())
TEST_MODELS = ROOT / "tests" / "backends" / "python" / "models"
EXAMPLES = ROOT / "examples" / "python_model_repository"

pytestmark = pytest.mark.differential


def python_repository(root: Path) -> Path:
    """The Python twins, the Python examples (simple_identity with Triton's own config where it is at
    hand), and test models that fail on request or complete their own configuration."""
    shutil.copytree(HERE / "triton_twins", root)
    shutil.rmtree(root / "simple_identity")
    for name in ("add_sub", "simple_identity"):
        shutil.copytree(EXAMPLES / name, root / name)
    fixture = TRITON_EXAMPLES / "simple_identity" / "config.pbtxt"
    if fixture.exists():
        shutil.copy(fixture, root / "simple_identity" / "config.pbtxt")
    for name in ("faulty", "auto"):
        shutil.copytree(TEST_MODELS / name, root / name)
    return root


@pytest.fixture(scope="module")
def python_servers(
    tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str
) -> Iterator[tuple[str, str]]:
    """Triton, and Nereid with Python models in worker processes or (thread mode) in its own process."""
    base = tmp_path_factory.mktemp("python_differential")
    with server_pair(
        base,
        repository=python_repository(base / "repository"),
        nereid_flags=execution_mode_flags(python_execution_mode),
    ) as pair:
        yield pair.triton_http, pair.nereid_http


CASES = HTTP_CASES + PYTHON_CASES


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_answer_from_python_models(
    python_servers: tuple[str, str], case: dict[str, Any], python_execution_mode: str
) -> None:
    if case.get("worker_process_only") and python_execution_mode == "thread":
        # The model crashes its process: in thread mode that is the server (the documented trade).
        pytest.skip("a model that crashes its process ends the server in thread mode")
    compare(*python_servers, case)


def test_case_names_are_unique() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
