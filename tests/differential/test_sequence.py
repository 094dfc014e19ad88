"""Sequence models on the real Triton and on Nereid, both serving the same Python accumulators.

The cases of sequence_cases.json depend on each other (a sequence starts, goes on, ends), so they run in
order: over HTTP, then again over gRPC, then all in one gRPC stream. Each run ends every sequence it
starts, so the next begins from a clean slate.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2_grpc

from tests.conftest import ROOT
from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import HERE, Servers, server_pair
from tests.differential.test_differential import compare
from tests.differential.test_differential_grpc import _call as call_rpc
from tests.differential.test_differential_grpc import grpc_request

CASES: list[dict[str, Any]] = json.loads((HERE / "sequence_cases.json").read_text())
GRPC_CASES = [case for case in CASES if "http_only" not in case.get("grpc", {})]

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def sequence_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("sequence_differential")
    repository = base / "repository"
    shutil.copytree(ROOT / "examples" / "sequence_model_repository", repository)
    with server_pair(base, grpc=True, repository=repository) as pair:
        yield pair


def test_case_names_are_unique() -> None:
    assert len({case["name"] for case in CASES}) == len(CASES)


def test_same_answers_over_http(sequence_servers: Servers) -> None:
    for case in CASES:
        try:
            compare(sequence_servers.triton_http, sequence_servers.nereid_http, case)
        except AssertionError as exc:
            raise AssertionError(f"case {case['name']!r}: {exc}") from None


def _unary(target: str, case: dict[str, Any]) -> tuple[grpc.StatusCode, str, Any]:
    return call_rpc(target, *grpc_request(case))


def _ignored(case: dict[str, Any]) -> set[str]:
    return set(case.get("ignore", [])) | set(case.get("grpc", {}).get("ignore", []))


def test_same_answers_over_grpc(sequence_servers: Servers) -> None:
    for case in GRPC_CASES:
        triton = _unary(sequence_servers.triton_grpc, case)
        nereid = _unary(sequence_servers.nereid_grpc, case)
        expected = case.get("grpc", {})
        code = getattr(grpc.StatusCode, expected["code"]) if "code" in expected else triton[0]
        assert nereid[0] == code, f"{case['name']}: Triton {triton[:2]}, Nereid {nereid[:2]}"
        if nereid[0] != grpc.StatusCode.OK:
            same_message(expected.get("error", case.get("error", "exact")), triton[1], nereid[1])
        elif triton[0] == grpc.StatusCode.OK:
            same_shape(
                triton[2],
                nereid[2],
                f"$[{case['name']}]",
                _ignored(case),
                case.get("numbers") == "any",
            )


def test_same_answers_inside_one_stream(sequence_servers: Servers) -> None:
    """The infer cases through one ModelStreamInfer each: in order, errors as `error_message`."""
    cases = [case for case in GRPC_CASES if grpc_request(case)[0] == "ModelInfer"]
    requests = [grpc_request(case)[1] for case in cases]
    answers = []
    for target in (sequence_servers.triton_grpc, sequence_servers.nereid_grpc):
        with grpc.insecure_channel(target) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answers.append(list(stub.ModelStreamInfer(iter(requests), timeout=60)))
    for case, t, n in zip(cases, *answers, strict=True):
        expected = case.get("grpc", {})
        if "code" in expected:  # Nereid refuses on purpose what Triton serves
            assert n.error_message and not t.error_message, case["name"]
            continue
        assert bool(t.error_message) == bool(n.error_message), f"{case['name']}: {t} / {n}"
        if t.error_message:
            same_message(case.get("error", "exact"), t.error_message, n.error_message)
            continue
        same_shape(
            json_format.MessageToDict(t.infer_response, preserving_proto_field_name=True),
            json_format.MessageToDict(n.infer_response, preserving_proto_field_name=True),
            f"$[{case['name']}]",
            _ignored(case),
            case.get("numbers") == "any",
        )
