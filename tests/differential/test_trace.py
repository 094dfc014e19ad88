"""The trace extension against the real Triton: the same trace setting requests, good and bad, over HTTP
and over gRPC (TraceSetting), both servers started with the same --trace-config.

Cases are data in trace_cases.json. A case's `setup` requests are sent to both servers first (not
compared), then its request; every case starts from the start-up settings (the test clears the global
and the 'simple' settings after each). The gRPC form of a case is its HTTP body as settings (a string is
one value, a list several, null none) unless the case gives `grpc.request`, or says `grpc.http_only`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import HERE, Servers, server_pair
from tests.differential.test_differential import _send, compare

CASES = json.loads((HERE / "trace_cases.json").read_text())
GRPC_CASES = [case for case in CASES if "http_only" not in case.get("grpc", {})]
_CLEAR = {"trace_level": None, "trace_rate": None, "trace_count": None, "log_frequency": None}

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("trace")
    flags = (
        f"--trace-config=triton,file={base / 'trace.json'}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    )
    with server_pair(base, *flags, grpc=True) as pair:
        yield pair


def _post(url: str, path: str, body: Any) -> None:
    status, _, answer = _send(url, {"method": "POST", "path": path, "json": body})
    assert status == 200, answer


@pytest.fixture
def fresh(servers: Servers) -> Iterator[Servers]:
    yield servers
    for url in (servers.triton_http, servers.nereid_http):
        _post(url, "/v2/models/simple/trace/setting", _CLEAR)
        _post(url, "/v2/trace/setting", _CLEAR)


def _setup(servers: Servers, case: dict[str, Any]) -> None:
    for step in case.get("setup", []):
        for url in (servers.triton_http, servers.nereid_http):
            _post(url, step["path"], step["json"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_http_answer(fresh: Servers, case: dict[str, Any]) -> None:
    _setup(fresh, case)
    compare(fresh.triton_http, fresh.nereid_http, case)


def grpc_request(case: dict[str, Any]) -> pb.TraceSettingRequest:
    given = case.get("grpc", {}).get("request")
    if given is not None:
        return json_format.ParseDict(given, pb.TraceSettingRequest())
    request = pb.TraceSettingRequest()
    if case["path"].startswith("/v2/models/"):
        request.model_name = case["path"].split("/")[3]
    if case["method"] == "POST":
        for key, value in case["json"].items():
            values = [] if value is None else [value] if isinstance(value, str) else value
            request.settings[key].value.extend(values)
    return request


def _call(target: str, request: pb.TraceSettingRequest) -> tuple[grpc.StatusCode, str, Any]:
    with grpc.insecure_channel(target) as channel:
        try:
            answer = service_pb2_grpc.GRPCInferenceServiceStub(channel).TraceSetting(request, timeout=30)
        except grpc.RpcError as error:
            return error.code(), error.details(), None
    return grpc.StatusCode.OK, "", json_format.MessageToDict(answer, preserving_proto_field_name=True)


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c["name"] for c in GRPC_CASES])
def test_same_grpc_answer(fresh: Servers, case: dict[str, Any]) -> None:
    _setup(fresh, case)
    request = grpc_request(case)
    triton = _call(fresh.triton_grpc, request)
    nereid = _call(fresh.nereid_grpc, request)
    assert nereid[0] == triton[0], (
        f"status: Triton {triton[0]} {triton[1]!r}, Nereid {nereid[0]} {nereid[1]!r}"
    )
    if triton[0] != grpc.StatusCode.OK:
        same_message(case.get("grpc", {}).get("error", case.get("error", "exact")), triton[1], nereid[1])
        return
    same_shape(triton[2], nereid[2], "$", set(case.get("ignore", [])))


def test_every_case_has_a_grpc_form_or_says_why() -> None:
    for case in CASES:
        reason = case.get("grpc", {}).get("http_only")
        assert reason is None or reason.strip(), case["name"]


def test_the_trace_file_is_the_same(servers: Servers) -> None:
    """Both servers report the file they were given (the same path)."""
    answers = [
        _send(url, {"method": "GET", "path": "/v2/trace/setting"})
        for url in (servers.triton_http, servers.nereid_http)
    ]
    files = {json.loads(body)["trace_file"] for _, _, body in answers}
    assert len(files) == 1 and Path(files.pop()).name == "trace.json"
