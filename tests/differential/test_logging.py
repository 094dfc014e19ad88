"""The logging extension on the real Triton and on Nereid, over HTTP and gRPC: reading the settings,
changing them, and every refusal with its status and text. Steps change the servers' settings, so they
run in order, each protocol's steps ending where they began."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import Servers
from tests.differential.test_differential import HERE, compare, server_pair
from tests.differential.test_differential_grpc import _call, grpc_request

pytestmark = pytest.mark.differential

CASES = json.loads((HERE / "logging_cases.json").read_text())


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    with server_pair(tmp_path_factory.mktemp("logging"), grpc=True) as pair:
        yield pair


def _steps(run: Any, steps: list[dict[str, Any]]) -> None:
    """Every step, then every mismatch at once (a later step depends on the earlier ones' effects)."""
    mismatches = []
    for step in steps:
        try:
            run(step)
        except AssertionError as exc:
            mismatches.append(f"{step['name']}: {exc}")
    assert not mismatches, "\n".join(mismatches)


def test_logging_over_http(servers: Servers) -> None:
    _steps(lambda step: compare(servers.triton_http, servers.nereid_http, step), CASES["http"])


def test_logging_over_grpc(servers: Servers) -> None:
    def run(step: dict[str, Any]) -> None:
        rpc, message = grpc_request(step)
        triton = _call(servers.triton_grpc, rpc, message)
        nereid = _call(servers.nereid_grpc, rpc, message)
        assert nereid[0] == triton[0], f"Triton {triton[0]} {triton[1]!r}, Nereid {nereid[0]} {nereid[1]!r}"
        if triton[0] != grpc.StatusCode.OK:
            same_message(step.get("error", "exact"), triton[1], nereid[1])
        else:
            same_shape(triton[2], nereid[2], "$", set())

    _steps(run, CASES["grpc"])
