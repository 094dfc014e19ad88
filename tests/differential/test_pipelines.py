"""Decoupled models and BLS on the real Triton and on Nereid, both serving the same Python models.

pipeline_cases.json holds the HTTP cases: generate, BLS through infer, and (`events`) generate_stream,
whose server-sent events are compared one by one. A gRPC stream to a decoupled model is compared
response by response.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import HERE, Servers, server_pair
from tests.differential.test_differential import compare
from tests.e2e.test_decoupled_and_bls import pipeline_repository

pytestmark = pytest.mark.differential

CASES: list[dict[str, Any]] = json.loads((HERE / "pipeline_cases.json").read_text())
ANSWER_CASES = [case for case in CASES if not case.get("events")]
EVENT_CASES = [case for case in CASES if case.get("events")]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("pipelines_differential")
    with server_pair(base, grpc=True, repository=pipeline_repository(base / "repository")) as pair:
        yield pair


@pytest.mark.parametrize("case", ANSWER_CASES, ids=[c["name"] for c in ANSWER_CASES])
def test_same_answer(servers: Servers, case: dict[str, Any]) -> None:
    compare(servers.triton_http, servers.nereid_http, case)


def _events(url: str, case: dict[str, Any]) -> tuple[int, str, list[Any]]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(case["method"], case["path"], body=orjson.dumps(case["json"]))
        response = connection.getresponse()
        text = response.read().decode()
        kind = response.getheader("content-type") or ""
    finally:
        connection.close()
    if not kind.startswith("text/event-stream"):
        return response.status, kind, [orjson.loads(text)]
    events = [orjson.loads(part[len("data: ") :]) for part in text.split("\n\n") if part.startswith("data: ")]
    return response.status, kind, events


@pytest.mark.parametrize("case", EVENT_CASES, ids=[c["name"] for c in EVENT_CASES])
def test_same_events(servers: Servers, case: dict[str, Any]) -> None:
    t_status, t_kind, triton = _events(servers.triton_http, case)
    n_status, n_kind, nereid = _events(servers.nereid_http, case)
    assert (n_status, n_kind) == (t_status, t_kind), f"Triton {t_status} {triton}, Nereid {n_status} {nereid}"
    assert len(nereid) == len(triton), f"Triton {triton}, Nereid {nereid}"
    for index, (t, n) in enumerate(zip(triton, nereid, strict=True)):
        if "error" in t:
            assert set(n) == {"error"}, n
            same_message(case.get("error", "exact"), t["error"], n["error"])
        else:
            same_shape(t, n, f"$[{index}]", set())


def _repeat(
    request_id: str, values: list[int], empty_final: bool = True, delay_ms: int = 10, **inputs: Any
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="repeat", id=request_id)
    tensor = message.inputs.add(name="IN", datatype="INT32", shape=[len(values)])
    tensor.contents.int_contents.extend(values)
    if inputs.get("delay", True):
        delay = message.inputs.add(name="DELAY_MS", datatype="INT32", shape=[1])
        delay.contents.int_contents.append(delay_ms)
    if empty_final:
        message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


STREAM = [
    _repeat("three", [1, 2, 3]),
    _repeat("error between", [4, -5, 6]),
    _repeat("zero", []),
    _repeat("no empty final", [7], empty_final=False),
    _repeat("missing input", [1], delay=False),
    _repeat("execute raises", [1], delay_ms=-1),
    pb.ModelInferRequest(model_name="nosuch", id="unknown model"),
]


def test_same_responses_in_streams(servers: Servers) -> None:
    """Each request's responses, in order. One stream per request, and responses some milliseconds
    apart: Triton 2.51 aborts (a gRPC assertion) when a decoupled model's responses overlap in its
    stream writer."""
    answers = []
    for target in (servers.triton_grpc, servers.nereid_grpc):
        with grpc.insecure_channel(target) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            by_request: dict[str, list[Any]] = {}
            for request in STREAM:
                for response in stub.ModelStreamInfer(iter([request]), timeout=60):
                    by_request.setdefault(response.infer_response.id, []).append(response)
            answers.append(by_request)
    triton, nereid = answers
    assert sorted(nereid) == sorted(triton) == sorted(m.id for m in STREAM)
    for request_id, t_responses in triton.items():
        n_responses = nereid[request_id]
        assert len(n_responses) == len(t_responses), (
            f"{request_id}: Triton {t_responses}, Nereid {n_responses}"
        )
        for index, (t, n) in enumerate(zip(t_responses, n_responses, strict=True)):
            assert n.error_message == t.error_message, f"{request_id}[{index}]: Triton {t}, Nereid {n}"
            if t.error_message:
                continue
            t_dict = json_format.MessageToDict(t.infer_response, preserving_proto_field_name=True)
            n_dict = json_format.MessageToDict(n.infer_response, preserving_proto_field_name=True)
            same_shape(t_dict, n_dict, f"{request_id}[{index}]", set())


def test_case_names_are_unique() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
