"""Ensembles on the real Triton and on Nereid, both serving one repository of Python composing models:
metadata, config, answers, sequence parameters through steps, errors, statistics, and the reasons
invalid ensembles are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import tests.differential.test_differential_grpc as over_grpc
from tests.differential.conftest import HERE, Servers, server_pair
from tests.differential.test_differential import compare
from tests.ensembles import invalid_ensembles, python_ensemble_repository

CASES: list[dict[str, Any]] = json.loads((HERE / "ensemble_cases.json").read_text())

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def ensemble_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("ensemble_differential")
    repository = python_ensemble_repository(base / "repository")
    invalid_ensembles(repository)
    flags = ("--exit-on-error=false", "--strict-readiness=false")
    with server_pair(base, *flags, repository=repository, grpc=True) as pair:
        yield pair


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_answer_from_ensembles(ensemble_servers: Servers, case: dict[str, Any]) -> None:
    compare(ensemble_servers.triton_http, ensemble_servers.nereid_http, case)


GRPC_CASES = [case for case in CASES if "http_only" not in case.get("grpc", {})]


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c["name"] for c in GRPC_CASES])
def test_same_grpc_answer_from_ensembles(ensemble_servers: Servers, case: dict[str, Any]) -> None:
    over_grpc.test_same_grpc_answer((ensemble_servers.triton_grpc, ensemble_servers.nereid_grpc), case)


def test_case_names_are_unique() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
