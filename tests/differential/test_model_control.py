"""Model control in explicit mode, step by step, on the real Triton and on Nereid: same statuses, same
index rows, same error texts (or a stated reason to differ). Steps change server state, so they run
in order in one test and every mismatch is reported together."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential.test_differential import HERE, compare, server_pair

STEPS = json.loads((HERE / "control_cases.json").read_text())
CONTROL = (
    "--model-control-mode=explicit",
    "--load-model=simple",
    "--http-restricted-api=model-repository:admin-key=s3cret",
)
AUTH = {"admin-key": "s3cret"}

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with server_pair(tmp_path_factory.mktemp("control"), *CONTROL) as pair:
        yield pair.triton_http, pair.nereid_http


def _step(triton_url: str, nereid_url: str, step: dict[str, Any]) -> None:
    case = dict(step)
    if not step.get("no_auth"):
        case["headers"] = {**AUTH, **step.get("headers", {})}
    compare(triton_url, nereid_url, case)


def test_model_control_steps(servers: tuple[str, str]) -> None:
    mismatches = []
    for step in STEPS:
        try:
            _step(*servers, step)
        except AssertionError as exc:
            mismatches.append(f"{step['name']}: {str(exc).splitlines()[0]}")
    assert not mismatches, "\n".join(mismatches)


def test_steps_are_named_once() -> None:
    names = [step["name"] for step in STEPS]
    assert len(names) == len(set(names))
