"""Ensembles on a real `nereid` process: a diamond whose branches run at the same time, a Python step
feeding an ONNX step, statistics, sequence parameters through a step, ensembles refused at load with
Triton's texts, and ensembles following their composing models through loads and unloads."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer, start_nereid, stop
from tests.ensembles import (
    CYCLE,
    INVALID_ENSEMBLES,
    TOO_LARGE_BATCH,
    invalid_ensembles,
    mixed_ensemble,
    python_ensemble_repository,
)

DELAY_S = 0.4  # how long each branch of the diamond takes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("ensembles")
    repository = python_ensemble_repository(base / "repository", DELAY_S)
    invalid_ensembles(repository)
    mixed_ensemble(repository)
    running = start_nereid(
        repository, base / "nereid.log", "--exit-on-error=false", "--strict-readiness=false", grpc=True
    )
    try:
        yield running
    finally:
        stop(running.process)


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as c:
        yield c


def _vector_input(values: np.ndarray, module=httpclient):  # type: ignore[no-untyped-def]
    tensor = module.InferInput("IN", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


def test_diamond_branches_run_at_the_same_time(client: httpclient.InferenceServerClient) -> None:
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    started = time.perf_counter()
    result = client.infer("diamond", [_vector_input(x)])
    elapsed = time.perf_counter() - started
    np.testing.assert_array_equal(result.as_numpy("OUT"), (x + 1) + (x * 2))
    (a_start, a_end), (b_start, b_end) = result.as_numpy("SPAN_A")[0], result.as_numpy("SPAN_B")[0]
    # Each branch saw the other one running: their executions overlap in time.
    assert a_start < b_end and b_start < a_end, (a_start, a_end, b_start, b_end)
    overlap = min(a_end, b_end) - max(a_start, b_start)
    assert overlap > DELAY_S / 2, overlap
    assert elapsed < 2 * DELAY_S, elapsed  # one after the other would take both delays


def test_diamond_over_grpc(server: RunningServer) -> None:
    assert server.grpc_url is not None
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        result = c.infer(
            "diamond", [_vector_input(x, grpcclient)], outputs=[grpcclient.InferRequestedOutput("OUT")]
        )
        np.testing.assert_array_equal(result.as_numpy("OUT"), 3 * x + 1)
        assert result.as_numpy("SPAN_A") is None  # only what was asked for


def test_ensemble_metadata_config_readiness_and_statistics(client: httpclient.InferenceServerClient) -> None:
    assert client.get_model_metadata("chain") == {
        "name": "chain",
        "versions": ["1"],
        "platform": "ensemble",
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [-1, 4]}],
    }
    config = client.get_model_config("chain")
    assert config["platform"] == "ensemble" and config["instance_group"] == []
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == ["add_one", "double"]
    assert client.is_model_ready("chain")

    before = client.get_inference_statistics("add_one")["model_stats"][0]["inference_stats"]["success"][
        "count"
    ]
    x = np.ones((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(client.infer("chain", [_vector_input(x)]).as_numpy("OUT"), (x + 1) * 2)
    stats = client.get_inference_statistics("chain")["model_stats"][0]
    assert stats["inference_count"] == 3 and stats["execution_count"] == 1
    assert stats["inference_stats"]["success"]["count"] == 1
    # the step counts as a request of its own model
    after = client.get_inference_statistics("add_one")["model_stats"][0]["inference_stats"]["success"][
        "count"
    ]
    assert after == before + 1


def test_an_ensemble_as_a_step(client: httpclient.InferenceServerClient) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_array_equal(client.infer("nested", [_vector_input(x)]).as_numpy("OUT"), (x + 1) * 2 + 1)


def test_a_failing_step_fails_the_request(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match=r"in ensemble 'step_fails', boom"):
        client.infer("step_fails", [_vector_input(np.zeros((1, 4), dtype=np.float32))])
    stats = client.get_inference_statistics("step_fails")["model_stats"][0]["inference_stats"]
    # as in Triton, the failed composing request counts among the ensemble's failures besides the request
    assert stats["fail"]["count"] == 2 and stats["success"]["count"] == 0
    # the ensemble and its other members keep serving
    assert client.infer("chain", [_vector_input(np.zeros((1, 4), dtype=np.float32))]).as_numpy(
        "OUT"
    ).tolist() == [[2.0] * 4]


def test_sequence_parameters_reach_the_step(client: httpclient.InferenceServerClient) -> None:
    result = client.infer(
        "sequence_through",
        [_vector_input(np.zeros((1, 4), dtype=np.float32))],
        sequence_id=42,
        sequence_start=True,
    )
    assert result.as_numpy("CORRID").tolist() == [[42]]
    # as Triton's ensembles do, the response echoes the sequence parameters
    assert result.get_response()["parameters"] == {
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
    }


def test_python_step_then_onnx_step(client: httpclient.InferenceServerClient) -> None:
    x = np.linspace(-3.2, 5.7, 16, dtype=np.float32).reshape(1, 16)
    tensor = httpclient.InferInput("X", [1, 16], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("python_then_onnx", [tensor])
    np.testing.assert_array_equal(result.as_numpy("TWICE"), 2 * np.rint(x).astype(np.int32))
    np.testing.assert_array_equal(result.as_numpy("ZERO"), np.zeros((1, 16), dtype=np.int32))
    assert client.get_inference_statistics("simple")["model_stats"][0]["inference_count"] >= 1


def test_invalid_ensembles_are_refused_with_the_reason(client: httpclient.InferenceServerClient) -> None:
    reasons = {row["name"]: row.get("reason") for row in client.get_model_repository_index()}
    for name, (_, message) in INVALID_ENSEMBLES.items():
        assert reasons[name] == message, name
        assert not client.is_model_ready(name)
    assert reasons["too_large_batch"] == TOO_LARGE_BATCH
    assert reasons["cycle"].startswith(CYCLE + ": the steps that would produce it depend on it themselves")
    assert "step 0 ('add_one') -> step 1 ('double') -> step 0 ('add_one')" in reasons["cycle"]


@pytest.fixture
def explicit_server(tmp_path: Path) -> Iterator[httpclient.InferenceServerClient]:
    repository = python_ensemble_repository(tmp_path / "repository")
    invalid_ensembles(repository)
    running = start_nereid(
        repository, tmp_path / "nereid.log", "--model-control-mode=explicit", "--load-model=chain"
    )
    try:
        with httpclient.InferenceServerClient(running.url.removeprefix("http://")) as c:
            yield c
    finally:
        stop(running.process)


def _ready(client: httpclient.InferenceServerClient) -> set[str]:
    return {row["name"] for row in client.get_model_repository_index() if row.get("state") == "READY"}


def test_ensembles_follow_their_composing_models(explicit_server: httpclient.InferenceServerClient) -> None:
    client = explicit_server
    x = np.zeros((1, 4), dtype=np.float32)
    # loading the ensemble loaded the models it calls
    assert _ready(client) == {"chain", "add_one", "double"}
    client.unload_model("add_one")
    assert _ready(client) == {"double"}
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert rows["chain"]["reason"] == "unloaded"
    with pytest.raises(InferenceServerException, match="'chain' has no available versions"):
        client.infer("chain", [_vector_input(x)])
    client.load_model("add_one")  # the ensemble comes back with it
    assert _ready(client) == {"chain", "add_one", "double"}
    assert client.infer("chain", [_vector_input(x)]).as_numpy("OUT").tolist() == [[2.0] * 4]
    client.unload_model("chain")  # its members stay
    assert _ready(client) == {"add_one", "double"}
    client.load_model("chain")
    client.unload_model("chain", unload_dependents=True)  # its members go with it
    assert _ready(client) == set()


def test_a_member_reloaded_out_of_shape_takes_its_ensemble_down(
    explicit_server: httpclient.InferenceServerClient,
) -> None:
    client = explicit_server
    config = client.get_model_config("add_one")
    for tensor in config["input"] + config["output"][:1]:
        tensor["dims"] = [5]
    client.load_model("add_one", config=json.dumps(config))
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert rows["chain"]["state"] == "UNAVAILABLE"
    assert rows["chain"]["reason"] == (
        "in ensemble chain, ensemble tensor IN: inconsistent shape: [-1,4] is inferred from model chain while "
        "[-1,5] is inferred from model add_one"
    )
    assert not client.is_model_ready("chain")
    config["input"][0]["dims"] = config["output"][0]["dims"] = [4]
    client.load_model("add_one", config=json.dumps(config))  # back in shape: the ensemble follows
    assert client.is_model_ready("chain")


def test_explicit_load_of_an_invalid_ensemble(explicit_server: httpclient.InferenceServerClient) -> None:
    client = explicit_server
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("unmapped_input")
    assert caught.value.message() == (
        "failed to load 'unmapped_input', load failed for model 'unmapped_input': "
        + INVALID_ENSEMBLES["unmapped_input"][1]
    )
    assert "sum" in _ready(client)  # the member it named was loaded for it, and stays
