"""Ensembles with a decoupled step (the `repeat` Python model) on a real `nereid` process, in both
Python execution modes: every response of the step flows on through the steps after it and out over
a gRPC stream (and HTTP generate_stream); the final flag, errors, cancellation, statistics, and the
decoupled policy Triton derives from the steps at load."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer, execution_mode_flags, start_nereid, stop
from tests.decoupled_ensembles import MIXED_ORIGINS, decoupled_ensemble_repository
from tests.e2e.test_decoupled_and_bls import DEADLINE_S, _events, _post, repeat_inputs, wait_for_log


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, python_execution_mode: str) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("decoupled_ensembles")
    running = start_nereid(
        decoupled_ensemble_repository(base / "repository"),
        base / "nereid.log",
        "--exit-on-error=false",
        "--strict-readiness=false",
        *execution_mode_flags(python_execution_mode),
        grpc=True,
    )
    try:
        yield running
    finally:
        stop(running.process)


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    opened = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield opened
    finally:
        opened.close()


class Stream:
    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self.client = client
        self.received: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(lambda result, error: self.received.put((result, error)))

    def send(
        self,
        model: str,
        values: list[int],
        delay_ms: int = 0,
        outputs: list[str] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs] if outputs else None
        self.client.async_stream_infer(
            model,
            repeat_inputs(grpcclient, values, delay_ms),
            request_id=model,
            outputs=requested,
            enable_empty_final_response=True,
            parameters=parameters,
        )

    def until_final(self) -> list[tuple[dict[str, list[int]], bool] | str]:
        """One request's responses (outputs, final flag) up to the final one, or up to an error."""
        got: list[tuple[dict[str, list[int]], bool] | str] = []
        while True:
            result, error = self.received.get(timeout=DEADLINE_S)
            if error is not None:
                got.append(str(error))
                return got
            response = result.get_response(as_json=True)
            final = response["parameters"]["triton_final_response"]["bool_param"]
            outputs = {o["name"]: result.as_numpy(o["name"]).tolist() for o in response.get("outputs", [])}
            assert response["id"] == response["model_name"]
            got.append((outputs, final))
            if final:
                return got


@pytest.fixture
def stream(client: grpcclient.InferenceServerClient) -> Iterator[Stream]:
    opened = Stream(client)
    try:
        yield opened
    finally:
        client.stop_stream()


def test_the_steps_decide_whether_an_ensemble_is_decoupled(client: grpcclient.InferenceServerClient) -> None:
    def decoupled(name: str) -> bool:
        config = client.get_model_config(name, as_json=True)["config"]
        return bool(config["model_transaction_policy"].get("decoupled", False))

    assert decoupled("repeat_tail") and decoupled("repeat_scale")
    assert not decoupled("declared_decoupled")  # declared, but no step is: Triton overrides it
    answer = client.infer("declared_decoupled", [_int_input("X", 4)])
    assert answer.as_numpy("Y").tolist() == [40]


def test_a_step_mixing_origins_is_refused(client: grpcclient.InferenceServerClient) -> None:
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["mixed_origins"]["state"] == "UNAVAILABLE"
    assert index["mixed_origins"]["reason"] == MIXED_ORIGINS


def test_a_decoupled_last_step_streams_each_response(stream: Stream) -> None:
    stream.send("repeat_tail", [3, 4, 5])
    assert stream.until_final() == [
        ({"OUT": [3], "IDX": [0]}, False),
        ({"OUT": [4], "IDX": [1]}, False),
        ({"OUT": [5], "IDX": [2]}, False),
        ({}, True),  # the step's flags-only final response
    ]


def test_no_response_from_the_decoupled_step_leaves_the_final_flag_alone(stream: Stream) -> None:
    stream.send("repeat_tail", [])
    assert stream.until_final() == [({}, True)]


@pytest.mark.parametrize("sent", [False, True], ids=["returned", "sent"])
def test_each_response_of_a_middle_step_goes_through_the_next_step(stream: Stream, sent: bool) -> None:
    # the next step's model answers by returning its response, or through a response sender
    stream.send("repeat_scale", [1, 2, 3], delay_ms=20, parameters={"send": True} if sent else None)
    got = stream.until_final()
    answers = _answers(got)
    # each answer pairs an element's index with its scaled value, whatever order they finished in
    assert sorted((a["IDX"][0], a["OUT"][0]) for a in answers) == [(0, 10), (1, 20), (2, 30)]
    assert [item[1] for item in got] == [False] * (len(got) - 1) + [True]


def test_a_request_naming_one_output_runs_only_its_steps(
    stream: Stream, client: grpcclient.InferenceServerClient
) -> None:
    before = _count(client, "times_ten")
    stream.send("repeat_scale", [1, 2], outputs=["IDX"])
    assert stream.until_final() == [({"IDX": [0]}, False), ({"IDX": [1]}, False), ({}, True)]
    assert _count(client, "times_ten") == before


def test_an_error_response_of_the_decoupled_step_ends_the_request(stream: Stream) -> None:
    stream.send("repeat_scale", [1, -2, 3], delay_ms=200)
    got = stream.until_final()
    assert got[-1] == "in ensemble 'repeat_scale', negative value -2 at index 1"
    assert all(item == ({"IDX": [0], "OUT": [10]}, False) for item in got[:-1])
    stream.send("repeat_tail", [9])  # the stream goes on
    assert stream.until_final() == [({"OUT": [9], "IDX": [0]}, False), ({}, True)]


def test_a_failing_step_after_the_decoupled_one_fails_the_request(
    stream: Stream, client: grpcclient.InferenceServerClient
) -> None:
    before = _statistics(client, "repeat_scale")
    stream.send("repeat_scale", [5000])
    assert stream.until_final() == ["in ensemble 'repeat_scale', too large"]
    stream.send("repeat_scale", [7])
    got = stream.until_final()
    # the final flag rides on the answer, or comes alone when the step's final flag came last
    assert _answers(got) == [{"IDX": [0], "OUT": [70]}] and got[-1][1] is True  # type: ignore[index]
    after = _statistics(client, "repeat_scale")
    failed = int(after["inference_stats"]["fail"].get("count", 0)) - int(
        before["inference_stats"]["fail"].get("count", 0)
    )
    # as in Triton: the failed request and its failed step count as failures, and only the second
    # request as a success
    assert failed == 2
    assert _success(after) == _success(before) + 1
    assert int(after.get("inference_count", 0)) == int(before.get("inference_count", 0)) + 1


def test_unary_inference_is_refused(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(
        InferenceServerException, match="doesn't support models with decoupled transaction policy"
    ):
        client.infer("repeat_tail", repeat_inputs(grpcclient, [1]))


def test_generate_stream_sends_each_response(server: RunningServer) -> None:
    response, connection = _post(
        server, "/v2/models/repeat_tail/generate_stream", {"IN": [6, 7], "DELAY_MS": 0}
    )
    assert response.status == 200
    events = _events(response.read().decode())
    connection.close()
    assert events == [
        {"IDX": 0, "OUT": 6, "model_name": "repeat_tail", "model_version": "1"},
        {"IDX": 1, "OUT": 7, "model_name": "repeat_tail", "model_version": "1"},
    ]


def test_cancelling_the_stream_cancels_the_decoupled_step(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    opened = Stream(client)
    opened.send("repeat_scale", list(range(1000)), delay_ms=20)
    opened.received.get(timeout=DEADLINE_S)  # it is under way
    client.stop_stream(cancel_requests=True)
    client.close()
    match = wait_for_log(server, r"repeat: cancelled after (\d+) of 1000 responses")
    assert int(match.group(1)) < 1000


def test_statistics_count_the_ensemble_once_and_each_step_per_request(
    stream: Stream, client: grpcclient.InferenceServerClient
) -> None:
    ensemble, repeat, scale = (_statistics(client, m) for m in ("repeat_scale", "repeat", "times_ten"))
    stream.send("repeat_scale", [1, 2, 3, 4])
    assert len(_answers(stream.until_final())) == 4
    after = [_statistics(client, m) for m in ("repeat_scale", "repeat", "times_ten")]
    assert _success(after[0]) == _success(ensemble) + 1
    assert _success(after[1]) == _success(repeat) + 1
    assert _success(after[2]) == _success(scale) + 4


def test_a_decoupled_request_keeps_its_inputs_after_execute_returns(stream: Stream) -> None:
    """The first request is answered after the second has run on the same instance."""
    stream.send("late_echo", [1, 2, 3], delay_ms=400)
    stream.send("late_echo", [7, 8, 9], delay_ms=0)
    got = [stream.received.get(timeout=DEADLINE_S) for _ in range(2)]
    assert [error for _, error in got] == [None, None]
    assert [result.as_numpy("OUT").tolist() for result, _ in got] == [[7, 8, 9], [1, 2, 3]]


def _int_input(name: str, value: int) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return tensor


def _statistics(client: grpcclient.InferenceServerClient, model: str) -> dict[str, Any]:
    return client.get_inference_statistics(model, as_json=True)["model_stats"][0]


def _success(statistics: dict[str, Any]) -> int:
    return int(statistics["inference_stats"]["success"].get("count", 0))


def _count(client: grpcclient.InferenceServerClient, model: str) -> int:
    return int(_statistics(client, model)["inference_count"])


def _answers(got: list[Any]) -> list[dict[str, list[int]]]:
    """The responses that carry outputs (not the flags-only final one, not an error)."""
    return [item[0] for item in got if isinstance(item, tuple) and item[0]]
