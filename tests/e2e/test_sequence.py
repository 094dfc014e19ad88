"""Sequence models in a `nereid` process: Triton's simple_sequence examples, and Python accumulators that
keep 64 interleaved sequences apart over HTTP, gRPC and gRPC streams, with both strategies."""

from __future__ import annotations

import asyncio
import queue
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT, TRITON_EXAMPLES, RunningServer, start_nereid, stop

SEQUENCE_EXAMPLES = ROOT / "examples" / "sequence_model_repository"
SEQUENCES = 64
STEPS = 4


def _value(sequence: int, step: int) -> int:
    return sequence * 10 + step + 1


def _expected_total(sequence: int, steps: int) -> int:
    return sum(_value(sequence, s) for s in range(steps))


def _with_strategy(config: Path, strategy: str) -> str:
    """The accumulator's config with the direct or oldest strategy (and a model name to match)."""
    text = config.read_text()
    text = re.sub(r"\s*(direct|oldest) \{[^}]*\}", "", text)
    return text.replace("sequence_batching {", f"sequence_batching {{\n  {strategy}", 1)


def _onnx_accumulator(folder: Path) -> None:
    """An ONNX model that adds its input to its implicit state: OUTPUT = OUTPUT_STATE = INPUT + INPUT_STATE."""
    shape: list[str | int | None] = ["batch", 1]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"]),
        ],
        "accumulator",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.INT32, shape),
            helper.make_tensor_value_info("INPUT_STATE", TensorProto.INT32, shape),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, shape),
            helper.make_tensor_value_info("OUTPUT_STATE", TensorProto.INT32, shape),
        ],
    )
    (folder / "1").mkdir(parents=True)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        folder / "1" / "model.onnx",
    )
    (folder / "config.pbtxt").write_text(
        'name: "onnx_accumulator_state"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        "sequence_batching {\n  direct { max_queue_delay_microseconds: 200 }\n"
        '  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]\n}\n'
    )


def _control(name: str, kind: str, values: str = "int32_false_true: [ 0, 1 ]") -> str:
    return f'{{ name: "{name}" control [ {{ kind: CONTROL_SEQUENCE_{kind} {values} }} ] }}'


def _simple_sequence_twin(folder: Path, dyna: bool) -> None:
    """Models that answer as Triton's simple_sequence (OUTPUT = READY * (INPUT + START)) and
    simple_dyna_sequence (adding END * CORRID), for machines without Triton's example files."""
    name = "simple_dyna_sequence" if dyna else "simple_sequence"
    shape: list[str | int | None] = ["batch", 1]
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["SUM"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT", "START", "READY")]
    controls = [_control("START", "START"), _control("READY", "READY")]
    total = "SUM"
    if dyna:
        nodes += [
            helper.make_node("Cast", ["CORRID"], ["CORRID32"], to=TensorProto.INT32),
            helper.make_node("Mul", ["END", "CORRID32"], ["END_TERM"]),
            helper.make_node("Add", ["SUM", "END_TERM"], ["TOTAL"]),
        ]
        inputs += [
            helper.make_tensor_value_info("END", TensorProto.INT32, shape),
            helper.make_tensor_value_info("CORRID", TensorProto.UINT64, shape),
        ]
        controls += [_control("END", "END"), _control("CORRID", "CORRID", "data_type: TYPE_UINT64")]
        total = "TOTAL"
    nodes.append(helper.make_node("Mul", ["READY", total], ["OUTPUT"]))
    graph = helper.make_graph(
        nodes, name, inputs, [helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, shape)]
    )
    (folder / "1").mkdir(parents=True)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        folder / "1" / "model.onnx",
    )
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f"sequence_batching {{ control_input [ {', '.join(controls)} ] }}\n"
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("sequence")
    repository = base / "model_repository"
    shutil.copytree(SEQUENCE_EXAMPLES, repository)
    for name, strategy in (
        ("accumulator_oldest", "oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 500 }"),
        ("accumulator_direct", "direct { }"),
    ):
        shutil.copytree(SEQUENCE_EXAMPLES / "accumulator", repository / name)
        config = _with_strategy(repository / name / "config.pbtxt", strategy)
        (repository / name / "config.pbtxt").write_text(config.replace('"accumulator"', f'"{name}"'))
    shutil.copytree(SEQUENCE_EXAMPLES / "accumulator_state", repository / "accumulator_state_direct")
    config = _with_strategy(repository / "accumulator_state_direct" / "config.pbtxt", "direct { }")
    (repository / "accumulator_state_direct" / "config.pbtxt").write_text(
        config.replace('"accumulator_state"', '"accumulator_state_direct"')
    )
    _onnx_accumulator(repository / "onnx_accumulator_state")
    for name in ("simple_sequence", "simple_dyna_sequence"):
        if (TRITON_EXAMPLES / name).exists():
            shutil.copytree(TRITON_EXAMPLES / name, repository / name)
        else:
            _simple_sequence_twin(repository / name, dyna=name == "simple_dyna_sequence")
    running = start_nereid(repository, base / "nereid.log", grpc=True)
    try:
        yield running
    finally:
        stop(running.process)


MODELS = [
    "accumulator_direct",
    "accumulator_oldest",
    "accumulator_state",
    "accumulator_state_direct",
    "onnx_accumulator_state",
]


def _check_totals(model: str, totals: dict[int, list[int]]) -> None:
    for sequence in range(SEQUENCES):
        assert totals[sequence] == [_expected_total(sequence, s + 1) for s in range(STEPS)], (model, sequence)


async def _run_sequences(
    module: Any, client: Any, model: str, sequence_id: Callable[[int], int | str]
) -> None:
    """64 sequences at once, each sending its steps one after the other; checks every running total."""

    async def one(sequence: int) -> list[int]:
        totals = []
        for step in range(STEPS):
            tensor = module.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[_value(sequence, step)]], dtype=np.int32))
            result = await client.infer(
                model,
                [tensor],
                sequence_id=sequence_id(sequence),
                sequence_start=step == 0,
                sequence_end=step == STEPS - 1,
            )
            totals.append(int(result.as_numpy("OUTPUT")[0, 0]))
        return totals

    results = await asyncio.gather(*(one(s) for s in range(SEQUENCES)))
    _check_totals(model, dict(enumerate(results)))


@pytest.mark.parametrize("model", MODELS)
def test_64_sequences_over_http(server: RunningServer, model: str) -> None:
    async def run() -> None:
        client = httpaio.InferenceServerClient(server.url, conn_limit=SEQUENCES)
        try:
            await _run_sequences(httpaio, client, model, lambda s: 1000 + s)
        finally:
            await client.close()

    asyncio.run(run())


@pytest.mark.parametrize("model", MODELS)
def test_64_sequences_over_grpc(server: RunningServer, model: str) -> None:
    async def run() -> None:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            # the state models take string ids; the others' CORRID input is UINT64
            await _run_sequences(
                grpcaio, client, model, lambda s: f"user-{s}" if "state" in model else 2000 + s
            )

    asyncio.run(run())


@pytest.mark.parametrize("model", MODELS)
def test_64_sequences_interleaved_in_one_grpc_stream(server: RunningServer, model: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for step in range(STEPS):  # step 0 of every sequence, then step 1 of every sequence, ...
            for sequence in range(SEQUENCES):
                tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[_value(sequence, step)]], dtype=np.int32))
                client.async_stream_infer(
                    model,
                    [tensor],
                    request_id=f"{sequence}/{step}",
                    sequence_id=5000 + sequence,
                    sequence_start=step == 0,
                    sequence_end=step == STEPS - 1,
                )
        totals: dict[int, list[int]] = {s: [0] * STEPS for s in range(SEQUENCES)}
        for _ in range(SEQUENCES * STEPS):
            result, error = answers.get(timeout=60)
            assert error is None, error
            sequence, step = map(int, result.get_response().id.split("/"))
            totals[sequence][step] = int(result.as_numpy("OUTPUT")[0, 0])
    finally:
        client.stop_stream()
        client.close()
    _check_totals(model, totals)


def test_control_inputs_reach_a_python_model(server: RunningServer) -> None:
    """START, END, READY and the correlation id, and the request flags, as the model sees them."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    flags = []
    for step, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[step]], dtype=np.int32))
        # gRPC carries the id as int64: -1 reaches the model as the uint64 2**64 - 1
        result = client.infer(
            "accumulator_direct", [tensor], sequence_id=-1, sequence_start=start, sequence_end=end
        )
        flags.append(result.as_numpy("FLAGS")[0].tolist())
        assert result.as_numpy("CORRID_OUT")[0, 0] == 2**64 - 1
    # [START, END, READY, request.flags()]
    assert flags == [[1, 0, 1, 1], [0, 0, 1, 0], [0, 1, 1, 2]]


def test_onnx_state_is_carried_and_its_config_leaves_the_state_out(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    config = client.get_model_config("onnx_accumulator_state").config
    assert [i.name for i in config.input] == ["INPUT"]  # auto-complete leaves the state to the batcher
    assert [o.name for o in config.output] == ["OUTPUT"]
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[5]], dtype=np.int32))
    totals = [
        int(
            client.infer("onnx_accumulator_state", [tensor], sequence_id=9, sequence_start=s == 0).as_numpy(
                "OUTPUT"
            )[0, 0]
        )
        for s in range(3)
    ]
    assert totals == [5, 10, 15]


def test_sequence_errors(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="must specify a non-zero or non-empty correlation ID"):
        client.infer("accumulator_direct", [tensor])
    with pytest.raises(InferenceServerException, match="must specify the START flag on the first request"):
        client.infer("accumulator_direct", [tensor], sequence_id=77)
    with pytest.raises(
        InferenceServerException,
        match="control 'CORRID' data-type is 'BYTES', but model 'accumulator_direct' expects 'UINT64'",
    ):
        client.infer("accumulator_direct", [tensor], sequence_id="text", sequence_start=True)


def test_triton_simple_sequence_examples(server: RunningServer) -> None:
    """simple_sequence answers READY * (INPUT + START); simple_dyna_sequence adds END * CORRID. Triton's own
    files where they are at hand, else twins built to answer the same."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    values = [11, 7, 5, 3]
    for model in ("simple_sequence", "simple_dyna_sequence"):
        got = []
        for step, value in enumerate(values):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            result = client.infer(
                model,
                [tensor],
                sequence_id=42,
                sequence_start=step == 0,
                sequence_end=step == len(values) - 1,
            )
            got.append(int(result.as_numpy("OUTPUT")[0, 0]))
        end_term = 42 if model == "simple_dyna_sequence" else 0
        assert got == [12, 7, 5, 3 + end_term], model
