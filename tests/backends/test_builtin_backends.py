"""Triton's test backends built in: identity, sequence, dyna_sequence, repeat and square; and Python-based
backends found in --backend-directory."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from nereid.backends import BackendRequest, InstanceSpec, get_backend
from nereid.backends.base import SEQUENCE_END, SEQUENCE_START
from nereid.backends.responses import ResponseStream
from nereid.errors import NereidError, Unsupported
from tests.backends.serving import failure, infer, model_dir, outputs_of, serving

IDENTITY = """backend: "identity"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 2, 3 ] optional: true },
  { name: "INPUT2" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2, 3 ] },
  { name: "OUTPUT2" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


def test_identity_copies_inputs_and_fills_left_out_optional_ones_with_zeros(tmp_path: Path) -> None:
    model_dir(tmp_path, "identity", IDENTITY)
    with serving(tmp_path) as engine:
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        outputs = infer(engine, "identity", {"INPUT0": data})
    np.testing.assert_array_equal(outputs["OUTPUT0"], data)
    np.testing.assert_array_equal(outputs["OUTPUT1"], np.zeros((2, 2, 3), np.int32))  # batched like INPUT0
    assert outputs["OUTPUT2"].shape == (2, 1)


def test_a_request_missing_a_required_input_is_told_the_range_when_some_are_optional(tmp_path: Path) -> None:
    model_dir(tmp_path, "identity", IDENTITY)
    with serving(tmp_path) as engine, pytest.raises(NereidError) as raised:
        infer(engine, "identity", {"INPUT1": np.zeros((1, 2, 3), np.int32)})
    assert raised.value.message == (
        "[request id: <id_unknown>] expected number of inputs between 1 and 3 but got 1 inputs for model "
        "'identity'. Got input(s) ['INPUT1'], but missing required input(s) ['INPUT0']. Please provide all "
        "required input(s)."
    )


def _spec(config_text: str, tmp_path: Path, instance_name: str = "m_0") -> InstanceSpec:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = text_format.Parse(config_text, mc.ModelConfig(name="m"))
    return InstanceSpec("m", 1, config, tmp_path, tmp_path, tmp_path, instance_name, "CPU", 0)


def test_identity_fails_a_request_without_a_required_input(tmp_path: Path) -> None:
    instance = get_backend("identity").create_instance(
        _spec(IDENTITY.replace("optional: true", ""), tmp_path)
    )
    (result,) = instance.execute([BackendRequest({"INPUT0": np.ones((1, 2), np.float32)}, ("OUTPUT1",))])
    assert isinstance(result, Unsupported) and result.message == "failed to get input 'INPUT1'"


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (('name: "OUTPUT2"', 'name: "RESULT2"'), "expected output name to follow OUTPUT<index> pattern"),
        (("TYPE_INT32 dims: [ 2, 3 ] }", "TYPE_FP32 dims: [ 2, 3 ] }"), "expected input and output datatype"),
        (("dims: [ 2, 3 ] }", "dims: [ 3, 2 ] }"), "expected input and output shape to match"),
    ],
)
def test_identity_refuses_configs_its_pairing_rules_reject(
    tmp_path: Path, change: tuple[str, str], text: str
) -> None:
    model_dir(tmp_path, "identity", IDENTITY.replace(*change))
    with serving(tmp_path) as engine:
        assert text in failure(engine, "identity")


def test_identity_delay_grows_with_the_instance_index(tmp_path: Path) -> None:
    delayed = IDENTITY + (
        'parameters { key: "execute_delay_ms" value: { string_value: "40" } }\n'
        'parameters { key: "instance_wise_delay_multiplier" value: { string_value: "3" } }\n'
    )
    request = BackendRequest({"INPUT0": np.ones((1, 1), np.float32)}, ("OUTPUT0",))
    elapsed = {}
    for name in ("m_0", "m_1"):
        instance = get_backend("identity").create_instance(_spec(delayed, tmp_path, name))
        start = time.monotonic()
        instance.execute([request])
        elapsed[name] = time.monotonic() - start
    assert elapsed["m_0"] >= 0.04  # at least execute_delay_ms, even where the multiplier gives 0
    assert elapsed["m_1"] >= 0.12  # 40 ms x 3 x instance 1


SEQUENCE = """backend: "sequence"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _step(correlation_id: int | str, value: int, flags: int = 0, **extra: np.ndarray) -> BackendRequest:
    inputs = {
        "INPUT": np.array([[value]], np.int32),
        "START": np.array([[1 if flags & SEQUENCE_START else 0]], np.int32),
        "END": np.array([[1 if flags & SEQUENCE_END else 0]], np.int32),
        "READY": np.array([[1]], np.int32),
        **extra,
    }
    return BackendRequest(inputs, ("OUTPUT",), correlation_id=correlation_id, flags=flags)


def _values(results: list) -> list[int]:
    return [int(outputs_of(r)["OUTPUT"].item()) for r in results]


def test_sequence_accumulates_per_sequence(tmp_path: Path) -> None:
    instance = get_backend("sequence").create_instance(_spec(SEQUENCE, tmp_path))
    assert _values(instance.execute([_step(1, 5, SEQUENCE_START), _step(2, 100, SEQUENCE_START)])) == [5, 100]
    assert _values(instance.execute([_step(2, 1), _step(1, 2)])) == [101, 7]
    assert _values(instance.execute([_step(1, 3, SEQUENCE_END)])) == [10]
    assert _values(instance.execute([_step(1, 4, SEQUENCE_START)])) == [4]  # a new sequence starts over
    (error,) = instance.execute([BackendRequest({"INPUT": np.ones((2, 1), np.int32)}, ("OUTPUT",))])
    assert isinstance(error, NereidError) and "more than one timestep" in error.message


def test_sequence_refuses_a_config_without_its_controls(tmp_path: Path) -> None:
    model_dir(tmp_path, "seq", SEQUENCE.replace('name: "READY"', 'name: "ACTIVE"'))
    with serving(tmp_path) as engine:
        assert "must be configured as the control inputs" in failure(engine, "seq")


def test_dyna_sequence_adds_the_correlation_id_at_the_end(tmp_path: Path) -> None:
    config = SEQUENCE.replace('backend: "sequence"', 'backend: "dyna_sequence"').replace(
        "  ]\n}",
        '    ,{ name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }\n'
        '    ,{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }\n'
        "  ]\n}",
    )
    instance = get_backend("dyna_sequence").create_instance(_spec(config, tmp_path))

    def corrid(text: str) -> np.ndarray:
        return np.array([[text.encode()]], dtype=object)

    assert _values(instance.execute([_step("17", 1, SEQUENCE_START, CORRID=corrid("17"))])) == [1]
    assert _values(instance.execute([_step("17", 2, SEQUENCE_END, CORRID=corrid("17"))])) == [20]
    (error,) = instance.execute([_step("x", 1, SEQUENCE_START, CORRID=corrid("x"))])
    assert isinstance(error, NereidError) and "correlation id 'x'" in error.message


REPEAT = """backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""
SQUARE = """backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _stream_of(instance: object, inputs: dict[str, np.ndarray]) -> tuple[list, list]:
    """execute() in a thread, as the scheduler runs it; what it returned and what reached the stream."""

    async def run() -> tuple[list, list]:
        stream = ResponseStream()
        request = BackendRequest(inputs, (), stream=stream)
        returned = await asyncio.to_thread(instance.execute, [request])  # type: ignore[attr-defined]
        items = []
        while True:
            result, final = await asyncio.wait_for(stream.get(), 10)
            items.append((result, final))
            if final:
                return returned, items

    return asyncio.run(run())


def test_repeat_sends_one_response_per_element_then_a_final_flag(tmp_path: Path) -> None:
    instance = get_backend("repeat").create_instance(_spec(REPEAT, tmp_path))
    inputs = {
        "IN": np.array([4, 5, 6], np.int32),
        "DELAY": np.array([0, 20, 0], np.uint32),
        "WAIT": np.array([0], np.uint32),
    }
    returned, items = _stream_of(instance, inputs)
    instance.close()
    assert returned == [{}]
    assert [(int(r["OUT"][0]), int(r["IDX"][0])) for r, _ in items[:-1]] == [(4, 0), (5, 1), (6, 2)]
    assert items[-1] == (None, True)


def test_repeat_not_decoupled_answers_its_one_element_once_sent_and_returned(tmp_path: Path) -> None:
    model_dir(tmp_path, "repeat_int32", REPEAT.replace("model_transaction_policy { decoupled: true }\n", ""))
    with serving(tmp_path) as engine:
        inputs = {
            "IN": np.array([7], np.int32),
            "DELAY": np.array([30], np.uint32),
            "WAIT": np.array([10], np.uint32),
        }
        started = time.monotonic()
        outputs = infer(engine, "repeat_int32", inputs)
        assert time.monotonic() - started >= 0.03  # the response is sent after DELAY
        assert outputs["OUT"].tolist() == [7] and outputs["IDX"].tolist() == [0]
        two = {**inputs, "IN": np.array([7, 8], np.int32), "DELAY": np.array([0, 0], np.uint32)}
        with pytest.raises(NereidError, match="answers a request of one element, got 2"):
            infer(engine, "repeat_int32", two)


def test_square_fails_and_leaves_out_the_last_responses_as_configured(tmp_path: Path) -> None:
    config = SQUARE + (
        'parameters { key: "CUSTOM_FAIL_COUNT" value: { string_value: "1" } }\n'
        'parameters { key: "CUSTOM_EMPTY_COUNT" value: { string_value: "1" } }\n'
    )
    instance = get_backend("square").create_instance(_spec(config, tmp_path))
    _, items = _stream_of(instance, {"IN": np.array([4], np.int32)})
    instance.close()
    assert [int(r["OUT"][0]) for r, _ in items[:2]] == [4, 4]
    assert isinstance(items[2][0], NereidError) and items[2][0].message == "simulated failure"
    assert items[3:] == [(None, True)]


def test_square_through_the_engine_streams_its_responses(tmp_path: Path) -> None:
    model_dir(tmp_path, "square_int32", SQUARE)
    with serving(tmp_path) as engine:
        from nereid.types import InferRequest, InferTensor

        async def collect() -> list:
            request = InferRequest(
                "square_int32", "", [InferTensor("IN", "INT32", (1,), np.array([3], np.int32))]
            )
            return [event async for event in engine.infer_stream(request)]

        events = asyncio.run(collect())
    responses = [e.response for e in events if e.response is not None]
    assert [r.outputs[0].data.tolist() for r in responses] == [[3], [3], [3]]
    assert events[-1].final


def test_square_reports_each_responses_statistics_by_its_place_in_the_stream(tmp_path: Path) -> None:
    """Two successes, a failure and an empty response per request; each response's counts and times
    go to its index, over both requests (Triton's response_stats)."""
    model_dir(
        tmp_path,
        "square_int32",
        SQUARE
        + 'parameters { key: "CUSTOM_INFER_DELAY_NS" value: { string_value: "20000000" } }\n'
        + 'parameters { key: "CUSTOM_OUTPUT_DELAY_NS" value: { string_value: "10000000" } }\n'
        + 'parameters { key: "CUSTOM_FAIL_COUNT" value: { string_value: "1" } }\n'
        + 'parameters { key: "CUSTOM_EMPTY_COUNT" value: { string_value: "1" } }\n',
    )
    with serving(tmp_path) as engine:
        from nereid.types import InferRequest, InferTensor

        async def collect() -> None:
            for _ in range(2):
                request = InferRequest(
                    "square_int32", "", [InferTensor("IN", "INT32", (1,), np.array([4], np.int32))]
                )
                assert len([event async for event in engine.infer_stream(request)]) == 4

        asyncio.run(collect())
        stats = engine.statistics("square_int32")["model_stats"][0]["response_stats"]
    counts = {
        index: {name: d["count"] for name, d in entry.items() if d["count"]} for index, entry in stats.items()
    }
    answered = {"compute_infer": 2, "compute_output": 2}
    assert counts == {
        "0": {**answered, "success": 2},
        "1": {**answered, "success": 2},
        "2": {**answered, "fail": 2},
        "3": {"compute_infer": 2, "empty_response": 2},
    }
    for entry in stats.values():  # two 20 ms computations at least, and their 10 ms outputs
        assert entry["compute_infer"]["ns"] >= 2 * 20_000_000
        outcome = next(entry[n] for n in ("success", "fail", "empty_response") if entry[n]["count"])
        assert outcome["ns"] == entry["compute_infer"]["ns"] + entry["compute_output"]["ns"]
    assert stats["0"]["compute_output"]["ns"] >= 2 * 10_000_000


def test_a_cancelled_response_counts_only_as_cancelled() -> None:
    from nereid.statistics import ModelStatistics

    statistics = ModelStatistics()
    statistics.record_response(0, "success", 100, 150, 190)
    statistics.record_response(1, "cancel", 200, None, 230)
    stats = statistics.to_json("m", "1")["response_stats"]
    assert stats["0"]["compute_infer"] == {"count": 1, "ns": 50}
    assert stats["0"]["compute_output"] == {"count": 1, "ns": 40}
    assert stats["0"]["success"] == {"count": 1, "ns": 90}
    assert {name: d for name, d in stats["1"].items() if d["count"]} == {"cancel": {"count": 1, "ns": 30}}


BACKEND_SCRIPT = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = json.loads(args["model_config"])["name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            label = np.array([self.name.encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", data * 2), pb_utils.Tensor("NAME", label)
            ]))
        return responses
"""

DOUBLER = """backend: "doubler"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "NAME" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def test_a_python_based_backend_serves_every_model_that_names_it(tmp_path: Path) -> None:
    backends, repository = tmp_path / "backends", tmp_path / "models"
    (backends / "doubler").mkdir(parents=True)
    (backends / "doubler" / "model.py").write_text(BACKEND_SCRIPT)
    model_dir(repository, "first", DOUBLER)
    model_dir(repository, "second", DOUBLER)
    model_dir(repository, "unknown", DOUBLER.replace("doubler", "tripler"))
    with serving(repository, backend_directory=backends) as engine:
        for name in ("first", "second"):
            outputs = infer(engine, name, {"IN": np.array([1, 2], np.int32)})
            assert outputs["OUT"].tolist() == [2, 4]
            assert outputs["NAME"].tolist() == [name.encode()]
        reason = failure(engine, "unknown")
    assert "backend 'tripler' is not supported" in reason and "tripler/model.py does not exist" in reason


NOP = """backend: "identity"
max_batch_size: 16
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
UNBATCHED_ENSEMBLE = """platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "nop" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""


def test_an_unbatched_ensemble_may_call_a_batching_identity_with_the_same_dims(tmp_path: Path) -> None:
    # As in Triton: the tensor's dims agree ([-1] and [-1]) though the full shapes do not ([-1] and [-1,-1]).
    model_dir(tmp_path, "nop", NOP)
    model_dir(tmp_path, "pipe", UNBATCHED_ENSEMBLE)
    model_dir(
        tmp_path,
        "bad",
        UNBATCHED_ENSEMBLE.replace("dims: [ -1 ] } ]\noutput", "dims: [ 2, 3, 4 ] } ]\noutput"),
    )
    with serving(tmp_path) as engine:
        assert infer(engine, "pipe", {"IN": np.array([1.5, 2.5], np.float32)})["OUT"].tolist() == [1.5, 2.5]
        assert "inconsistent shape: [2,3,4] is inferred from model bad while [-1,-1]" in failure(
            engine, "bad"
        )


def test_a_batching_ensemble_may_contain_a_non_batching_model_and_inherits_its_labels(tmp_path: Path) -> None:
    nop = NOP.replace("max_batch_size: 16", "max_batch_size: 0").replace(
        'name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ]',
        'name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt"',
    )
    model_dir(tmp_path, "nop", nop)
    (tmp_path / "nop" / "labels.txt").write_text("cat\ndog\n")
    model_dir(tmp_path, "pipe", UNBATCHED_ENSEMBLE.replace("max_batch_size: 0", "max_batch_size: 8"))
    with serving(tmp_path) as engine:
        assert engine.models.get("pipe").outputs["OUT"].labels == ("cat", "dog")
        # a batch of one reaches the non-batching model without its batch dimension, and comes back with it
        assert infer(engine, "pipe", {"IN": np.array([[1.0, 2.0]], np.float32)})["OUT"].tolist() == [
            [1.0, 2.0]
        ]


def test_a_model_file_named_in_the_config_is_not_needed_by_a_builtin_backend(tmp_path: Path) -> None:
    model_dir(tmp_path, "seq", SEQUENCE + 'default_model_filename: "libtriton_sequence.so"\n')
    with serving(tmp_path) as engine:
        assert [r["state"] for r in engine.models.index() if r["name"] == "seq"] == ["READY"]


def test_identity_answers_with_parameters_counts_input_bytes_and_logs_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from nereid.backends.identity import BYTE_SIZE_METRIC, RESPONSE_PARAMETERS
    from nereid.types import InferRequest, InferTensor

    model_dir(tmp_path, "identity", IDENTITY)
    with serving(tmp_path) as engine:
        strings = np.array([[b"abc"], [b""]], dtype=object)  # 4 + 3 and 4 + 0 bytes on the wire
        tensors = [
            InferTensor("INPUT0", "FP32", (2, 5), np.zeros((2, 5), np.float32)),
            InferTensor("INPUT2", "BYTES", (2, 1), strings),
        ]
        with caplog.at_level(logging.DEBUG, logger="nereid.backends.identity"):
            response = asyncio.run(engine.infer(InferRequest("identity", "", tensors, None, "r1")))
        infer(engine, "identity", {"INPUT0": np.zeros((1, 3), np.float32)})  # 12 bytes more
        (family,) = [f for f in engine.models.custom_metrics.snapshot() if f.name == BYTE_SIZE_METRIC]
    assert response.parameters == RESPONSE_PARAMETERS
    ((labels, series),) = family.series.items()
    assert dict(labels) == {"model": "identity", "version": "1"}
    assert series.value == 40 + 11 + 12
    logged = [r.getMessage() for r in caplog.records if "byte_size = " in r.getMessage()]
    assert any("input INPUT0" in m and m.endswith("byte_size = 40") for m in logged)
    assert any("input INPUT2" in m and m.endswith("byte_size = 11") for m in logged)
    # unloaded, the model's series goes
    assert not [f for f in engine.models.custom_metrics.snapshot() if f.name == BYTE_SIZE_METRIC]


def test_a_gpu_instance_of_a_test_backend_fails_in_tritons_words(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    model_dir(tmp_path, "on_gpu", IDENTITY + "instance_group [{ kind: KIND_GPU }]")
    with serving(tmp_path) as engine:
        assert failure(engine, "on_gpu").startswith("Internal: GPU instances not supported")
    assert "failed to load 'on_gpu' version 1: Internal: GPU instances not supported" in caplog.text


def test_an_identity_model_without_tensors_loads(tmp_path: Path) -> None:
    model_dir(tmp_path, "bare_identity", 'backend: "identity"\ninstance_group [{ kind: KIND_CPU count: 2 }]')
    with serving(tmp_path) as engine:
        assert engine.models.get("bare_identity").config_json["instance_group"][0]["count"] == 2
