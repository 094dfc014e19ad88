"""Ensembles with a decoupled step on the real Triton and on Nereid, both serving the same Python
models (tests/decoupled_ensembles.py): the decoupled policy derived from the steps, the load refusal of a
step mixing origins, and each request's stream of responses over gRPC.

Within one response the outputs are compared by name (Triton lists an ensemble's outputs in the order
of a hash map). Where a decoupled step is followed by another step, whether the final flag rides on the
last answer or comes alone is a race in Triton too (the step's flags-only final against the last answer
of the next step), so there the answers are compared in order and the final flag only as the last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.decoupled_ensembles import MIXED_ORIGINS, decoupled_ensemble_repository
from tests.differential.conftest import Servers, server_pair

pytestmark = pytest.mark.differential

# (outputs by name, final flag) for an answer; the error message for an error
Response = tuple[dict[str, list[int]], bool] | str


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("decoupled_ensembles_differential")


@pytest.fixture(scope="module")
def servers(base: Path) -> Iterator[Servers]:
    repository = decoupled_ensemble_repository(base / "repository")
    flags = ("--exit-on-error=false", "--strict-readiness=false")
    with server_pair(base, *flags, repository=repository, grpc=True) as pair:
        yield pair


def _request(
    model: str, values: list[int], delay_ms: int, outputs: tuple[str, ...] = ()
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model, id=f"{model}{values}{outputs}")
    tensor = message.inputs.add(name="IN", datatype="INT32", shape=[len(values)])
    tensor.contents.int_contents.extend(values)
    delay = message.inputs.add(name="DELAY_MS", datatype="INT32", shape=[1])
    delay.contents.int_contents.append(delay_ms)
    for name in outputs:
        message.outputs.add(name=name)
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


def _responses(target: str, request: pb.ModelInferRequest) -> list[Response]:
    """One request's responses on its own stream (Triton 2.51 must not write two responses at once)."""
    got: list[Response] = []
    with grpc.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for message in stub.ModelStreamInfer(iter([request]), timeout=60):
            if message.error_message:
                got.append(message.error_message)
                continue
            response = message.infer_response
            assert response.id == request.id
            result = grpcclient.InferResult(response)
            outputs = {o.name: result.as_numpy(o.name).tolist() for o in response.outputs}
            got.append((outputs, response.parameters["triton_final_response"].bool_param))
    return got


def _answers(responses: list[Response]) -> list[Any]:
    return [r[0] if isinstance(r, tuple) else r for r in responses if not isinstance(r, tuple) or r[0]]


def test_same_decoupled_policy(servers: Servers) -> None:
    for model in ("repeat_tail", "repeat_scale", "declared_decoupled"):
        policies = []
        for target in (servers.triton_grpc, servers.nereid_grpc):
            client = grpcclient.InferenceServerClient(target)
            policies.append(
                client.get_model_config(model, as_json=True)["config"].get("model_transaction_policy")
            )
            client.close()
        assert policies[0] == policies[1], model


def test_same_refusal_of_mixed_origins(servers: Servers, base: Path) -> None:
    """Triton refuses the ensemble while it builds the dependency graph, before the ensemble has a state
    of its own in the index, so its reason is read from its log; Nereid reports it in the index."""
    triton_log = (base / "triton.log").read_text()
    assert f"Invalid argument: {MIXED_ORIGINS}" in triton_log
    client = grpcclient.InferenceServerClient(servers.nereid_grpc)
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    client.close()
    assert index["mixed_origins"]["reason"] == MIXED_ORIGINS


TAIL_CASES = {
    "three": _request("repeat_tail", [3, 4, 5], 20),
    "none": _request("repeat_tail", [], 0),
    "error between": _request("repeat_tail", [1, -2, 3], 100),
}
MIDDLE_CASES = {
    "three": _request("repeat_scale", [1, 2, 3], 100),
    "one output, one step": _request("repeat_scale", [1, 2], 50, ("IDX",)),
    "error of the decoupled step": _request("repeat_scale", [1, -2, 3], 300),
    "error of the next step": _request("repeat_scale", [5000], 0),
}


@pytest.mark.parametrize("name", list(TAIL_CASES))
def test_same_stream_from_a_decoupled_last_step(servers: Servers, name: str) -> None:
    request = TAIL_CASES[name]
    triton = _responses(servers.triton_grpc, request)
    assert _responses(servers.nereid_grpc, request) == triton


@pytest.mark.parametrize("name", list(MIDDLE_CASES))
def test_same_stream_through_a_step_after_the_decoupled_one(servers: Servers, name: str) -> None:
    request = MIDDLE_CASES[name]
    triton = _responses(servers.triton_grpc, request)
    nereid = _responses(servers.nereid_grpc, request)
    assert _answers(nereid) == _answers(triton), json.dumps([triton, nereid])
    for responses in (triton, nereid):
        finals = [r[1] for r in responses if isinstance(r, tuple)]
        assert isinstance(responses[-1], str) or finals == [False] * (len(finals) - 1) + [True]


def _counts(target: str, model: str) -> dict[str, Any]:
    """A model's statistics with every duration left out: the counts alone can be compared."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("ns", "last_inference")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    client = grpcclient.InferenceServerClient(target)
    try:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    finally:
        client.close()
    return strip(stats)


def _settled(target: str, models: tuple[str, ...], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The models' counts once the failed request is recorded: Triton records the decoupled step's
    request, and then the ensemble's, after the error went out; until they are, the counts are polled,
    and then read until steady."""

    def outcomes(stats: dict[str, Any]) -> int:
        inference = stats["inference_stats"]
        return int(inference["success"].get("count", 0)) + int(inference["fail"].get("count", 0))

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = [_counts(target, m) for m in models]
        if all(outcomes(a) > outcomes(b) for a, b in zip(after, before, strict=True)):
            break
        time.sleep(0.02)  # a poll's pace, not a guess at the time the servers need
    return _steady(target, models)


def _steady(target: str, models: tuple[str, ...]) -> list[dict[str, Any]]:
    """The models' counts once the earlier cases' requests are all recorded (Triton records some just
    after their last response): two reads in a row agree."""
    deadline = time.monotonic() + 10
    last = [_counts(target, m) for m in models]
    while time.monotonic() < deadline:
        time.sleep(0.2)  # a poll's pace
        now = [_counts(target, m) for m in models]
        if now == last:
            break
        last = now
    return last


def test_same_statistics_after_a_request_failed_by_the_step_after_the_decoupled_one(
    servers: Servers,
) -> None:
    """times_ten refuses 5000 after repeat answered it: the ensemble's request counts as failed, beside
    its failed step (as for unary ensembles), and not as a success; times_ten, a Python model that
    answered with an error response, counts a success."""
    models = ("repeat_scale", "repeat", "times_ten")
    got = []
    for target in (servers.triton_grpc, servers.nereid_grpc):
        before = _steady(target, models)
        assert _responses(target, _request("repeat_scale", [5000], 0)) == [
            "in ensemble 'repeat_scale', too large"
        ]
        after = _settled(target, models, before)
        got.append({m: _delta(b, a) for m, b, a in zip(models, before, after, strict=True)})
    triton, nereid = got
    # Triton counts the failed step among the ensemble's failures or not, depending on whether the step's
    # error or the decoupled step's final flag reaches the ensemble first: one failure or two, never a
    # success. Nereid always counts both, as for unary ensembles.
    assert triton["repeat_scale"] in ({"/inference_stats/fail/count": 1}, {"/inference_stats/fail/count": 2})
    assert nereid["repeat_scale"] == {"/inference_stats/fail/count": 2}
    assert {m: d for m, d in nereid.items() if m != "repeat_scale"} == {
        m: d for m, d in triton.items() if m != "repeat_scale"
    }, json.dumps(got)


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """What the request added to each count (the earlier cases of this module leave counts behind)."""

    def leaves(value: Any, path: str = "") -> dict[str, int]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}/{key}").items()}
        if isinstance(value, list):  # batch_stats: by batch size
            return {
                k: v for item in value for k, v in leaves(item, f"{path}/{item.get('batch_size')}").items()
            }
        return {path: int(value)} if path.endswith("count") else {}

    was, now = leaves(before), leaves(after)
    return {path: now[path] - was.get(path, 0) for path in now if now[path] != was.get(path, 0)}
