"""Triton-mode traces end to end: Nereid serving with --trace-config, driven by tritonclient, its trace
file read the way Triton's qa/common/trace_summary.py reads it (records grouped by id, model records,
named timestamps in order, parent ids, tensors)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import EXAMPLES, RunningServer, start_nereid, stop

# The order of a request's timestamps through a model that computes (trace_summary.py's spans).
MODEL_ORDER = (
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
)
HTTP_ORDER = (
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
)
GRPC_ORDER = (
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "REQUEST_START",
    "REQUEST_END",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
)


def _repository(root: Path) -> Path:
    shutil.copytree(EXAMPLES / "simple", root / "simple")
    io = "\n".join(
        f'{kind} [ {{ name: "{name}{i}" data_type: TYPE_INT32 dims: [ 16 ] }}, '
        f'{{ name: "{name}{i + 1}" data_type: TYPE_INT32 dims: [ 16 ] }} ]'
        for kind, name, i in (("input", "INPUT", 0), ("output", "OUTPUT", 0))
    )
    maps = "".join(f' input_map {{ key: "INPUT{i}" value: "INPUT{i}" }}' for i in (0, 1))
    maps += "".join(f' output_map {{ key: "OUTPUT{i}" value: "OUTPUT{i}" }}' for i in (0, 1))
    (root / "ensemble_simple" / "1").mkdir(parents=True)
    (root / "ensemble_simple" / "config.pbtxt").write_text(
        f'name: "ensemble_simple"\nplatform: "ensemble"\nmax_batch_size: 8\n{io}\n'
        f'ensemble_scheduling {{ step [ {{ model_name: "simple" model_version: -1{maps} }} ] }}\n'
    )
    return root


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return _repository(tmp_path / "models")


def _serve(
    tmp_path: Path,
    repository: Path,
    stopping: list[RunningServer],
    *levels: str,
    rate: int = 1,
    extra: tuple[str, ...] = (),
) -> tuple[RunningServer, Path]:
    """Nereid tracing to tmp_path/trace.json at `levels` (TIMESTAMPS by default), and that file."""
    trace_file = tmp_path / "trace.json"
    flags = [f"--trace-config=triton,file={trace_file}", f"--trace-config=rate={rate}"]
    flags += [f"--trace-config=level={level}" for level in levels or ("TIMESTAMPS",)]
    server = start_nereid(repository, tmp_path / "nereid.log", *flags, *extra, grpc=True)
    stopping.append(server)
    return server, trace_file


@pytest.fixture
def stopping() -> Iterator[list[RunningServer]]:
    """Servers to stop at the end, even when the test fails."""
    servers: list[RunningServer] = []
    yield servers
    for server in servers:
        stop(server.process)


def _inputs(module: Any, a: np.ndarray) -> list[Any]:
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return inputs


def _http_infer(server: RunningServer, model: str = "simple", request_id: str = "") -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with httpclient.InferenceServerClient(server.url) as client:
        result = client.infer(model, _inputs(httpclient, a), request_id=request_id)
    assert (result.as_numpy("OUTPUT0") == a + 1).all()


def _grpc_infer(server: RunningServer, model: str = "simple") -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(model, _inputs(grpcclient, a))
    assert (result.as_numpy("OUTPUT0") == a + 1).all()


def _read(path: Path) -> list[dict[str, Any]]:
    records = json.loads(path.read_text())
    assert isinstance(records, list) and all(isinstance(r, dict) and "id" in r for r in records)
    return records


def _traces(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Records grouped by trace id, as trace_summary.py groups them."""
    traces: dict[int, dict[str, Any]] = {}
    for record in records:
        trace = traces.setdefault(record["id"], {"timestamps": {}, "tensors": []})
        for key in ("model_name", "model_version", "request_id", "parent_id"):
            if key in record:
                trace[key] = record[key]
        for stamp in record.get("timestamps", []):
            assert set(stamp) == {"name", "ns"} and isinstance(stamp["ns"], int)
            trace["timestamps"][stamp["name"]] = stamp["ns"]
        if "activity" in record:
            trace["tensors"].append((record["activity"], record["tensor"]))
    return traces


def _in_order(trace: dict[str, Any], names: tuple[str, ...]) -> None:
    stamps = trace["timestamps"]
    missing = [n for n in names if n not in stamps]
    assert not missing, f"trace {trace} lacks {missing}"
    values = [stamps[n] for n in names]
    assert values == sorted(values), f"out of order: {list(zip(names, values, strict=True))}"


def _stop_and_read(server: RunningServer, path: Path) -> list[dict[str, Any]]:
    stop(server.process)
    return _read(path)


def test_http_grpc_and_ensemble_traces(
    tmp_path: Path, repository: Path, stopping: list[RunningServer]
) -> None:
    server, trace_file = _serve(tmp_path, repository, stopping, "TIMESTAMPS", "TENSORS")
    _http_infer(server, request_id="first")
    _grpc_infer(server)
    _http_infer(server, "ensemble_simple")
    traces = _traces(_stop_and_read(server, trace_file))
    assert sorted(traces) == [1, 2, 3, 4]
    http, grpc_, ensemble, step = (traces[i] for i in (1, 2, 3, 4))
    assert (http["model_name"], http["model_version"], http["request_id"]) == ("simple", 1, "first")
    assert "parent_id" not in http and "request_id" not in grpc_
    for trace in (http, grpc_, step):
        _in_order(trace, MODEL_ORDER)
    _in_order(http, HTTP_ORDER)
    _in_order(grpc_, GRPC_ORDER)
    # the ensemble computes nothing itself; its step is a child trace
    assert ensemble["model_name"] == "ensemble_simple" and "COMPUTE_START" not in ensemble["timestamps"]
    _in_order(ensemble, ("HTTP_RECV_START", "REQUEST_START", "QUEUE_START", "REQUEST_END", "HTTP_SEND_END"))
    assert (step["model_name"], step["parent_id"]) == ("simple", 3)
    assert ensemble["timestamps"]["REQUEST_START"] <= step["timestamps"]["REQUEST_START"]
    assert step["timestamps"]["REQUEST_END"] <= ensemble["timestamps"]["REQUEST_END"]
    # TENSORS: inputs as queued, outputs as the model answered, in trace_summary's text form
    queued = {t["name"]: t for activity, t in http["tensors"] if activity == "TENSOR_QUEUE_INPUT"}
    answered = {t["name"]: t for activity, t in http["tensors"] if activity == "TENSOR_BACKEND_OUTPUT"}
    assert set(queued) == {"INPUT0", "INPUT1"} and set(answered) == {"OUTPUT0", "OUTPUT1"}
    assert queued["INPUT0"] == {
        "name": "INPUT0",
        "data": ",".join(map(str, range(16))),
        "shape": "1,16",
        "dtype": "INT32",
    }
    assert [int(v) for v in answered["OUTPUT0"]["data"].split(",")] == list(range(1, 17))


def test_rate_and_a_model_log_frequency_set_over_http(
    tmp_path: Path, repository: Path, stopping: list[RunningServer]
) -> None:
    """L0_trace's flow: global rate 6, then 'simple' logs every 2 traces: 20 requests give 3 traces,
    2 in trace.json.0 and the last one in trace.json.1 at shutdown."""
    server, trace_file = _serve(tmp_path, repository, stopping, rate=6)
    with httpclient.InferenceServerClient(server.url) as client:
        answer = client.update_trace_settings("simple", {"log_frequency": "2"})
        assert (answer["trace_rate"], answer["log_frequency"]) == ("6", "2")
        with pytest.raises(Exception, match="trace file location can not be updated"):
            client.update_trace_settings("simple", {"trace_file": "elsewhere.json"})
    for _ in range(10):
        _http_infer(server)
        _grpc_infer(server)
    stop(server.process)
    assert not trace_file.exists()
    first, second = (_traces(_read(Path(f"{trace_file}.{i}"))) for i in (0, 1))
    assert (len(first), len(second)) == (2, 1)
    for trace in (*first.values(), *second.values()):
        _in_order(trace, MODEL_ORDER)


def test_tracing_turned_on_then_counted(
    tmp_path: Path, repository: Path, stopping: list[RunningServer]
) -> None:
    """Off at start, on over gRPC, then a count of 3: the first traces go to trace.json at shutdown,
    the counted ones to trace.json.0 as soon as the count is reached."""
    server, trace_file = _serve(tmp_path, repository, stopping, "OFF")
    _http_infer(server)  # not traced
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        answer = client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        assert list(answer.settings["trace_level"].value) == ["TIMESTAMPS"]
        _grpc_infer(server)
        _http_infer(server)
        client.update_trace_settings(settings={"trace_count": "3"})
        for _ in range(5):
            _http_infer(server)
        answer = client.get_trace_settings(model_name="simple")
        assert list(answer.settings["trace_count"].value) == ["0"]
    counted = _traces(_read(Path(f"{trace_file}.0")))
    assert len(counted) == 3
    before = _traces(_stop_and_read(server, trace_file))
    assert len(before) == 2 and not set(before) & set(counted)


BLS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            # traced as the request's child, as in Triton, only when given the request's trace
            traced = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"], inputs=inputs, trace=request.trace()
            ).exec()
            pb_utils.InferenceRequest(model_name="simple", requested_output_names=["OUTPUT0"], inputs=inputs).exec()
            if traced.has_error():
                raise pb_utils.TritonModelException(traced.error().message())
            out = pb_utils.get_output_tensor_by_name(traced, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""


def _python_model(repository: Path, name: str, code: str, config: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "1" / "model.py").write_text(code)
    (repository / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{config}')


def _bls_model(repository: Path, mode: str, code: str) -> None:
    """bls_simple: a Python model (in `mode`) that calls 'simple' through BLS."""
    _python_model(
        repository,
        "bls_simple",
        code,
        "max_batch_size: 8\n"
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, '
        '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        f'parameters {{ key: "EXECUTION_MODE" value {{ string_value: "{mode}" }} }}\n',
    )


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_bls_calls_given_the_trace_are_child_traces(
    tmp_path: Path, repository: Path, stopping: list[RunningServer], mode: str
) -> None:
    _bls_model(repository, mode, BLS_MODEL)
    server, trace_file = _serve(tmp_path, repository, stopping)
    _http_infer(server, "bls_simple")
    traces = _traces(_stop_and_read(server, trace_file))
    assert sorted(traces) == [1, 2]
    bls, child = traces[1], traces[2]
    assert (bls["model_name"], child["model_name"], child["parent_id"]) == ("bls_simple", "simple", 1)
    _in_order(bls, MODEL_ORDER)
    _in_order(child, MODEL_ORDER)
    assert bls["timestamps"]["COMPUTE_START"] <= child["timestamps"]["REQUEST_START"]
    assert child["timestamps"]["REQUEST_END"] <= bls["timestamps"]["COMPUTE_OUTPUT_START"]


def test_stream_requests_are_traced(tmp_path: Path, repository: Path, stopping: list[RunningServer]) -> None:
    server, trace_file = _serve(tmp_path, repository, stopping)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    answers: list[Any] = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        for index in range(2):
            client.async_stream_infer("simple", _inputs(grpcclient, a), request_id=f"s{index}")
        client.stop_stream()
    assert [answer.get_response().id for answer in answers] == ["s0", "s1"]
    traces = _traces(_stop_and_read(server, trace_file))
    assert sorted(t["request_id"] for t in traces.values()) == ["s0", "s1"]
    for trace in traces.values():
        _in_order(trace, MODEL_ORDER)
        _in_order(trace, GRPC_ORDER)


REPEAT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([index], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _named(records: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Each trace's timestamp names in the order written, repeats kept."""
    names: dict[int, list[str]] = {}
    for record in records:
        for stamp in record.get("timestamps", []):
            names.setdefault(record["id"], []).append(stamp["name"])
    return names


def _post(server: RunningServer, path: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(f"http://{server.url}{path}", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as answer:
        return bytes(answer.read())


def test_generate_and_generate_stream_are_traced_as_triton_traces_them(
    tmp_path: Path, repository: Path, stopping: list[RunningServer]
) -> None:
    """generate: the frontend's and the model's timestamps, as for infer. generate_stream: each response
    adds INFER_RESPONSE_COMPLETE and HTTP_SEND_START/END; the final flag alone only the former."""
    _python_model(
        repository,
        "repeat",
        REPEAT_MODEL,
        "max_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n"
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n',
    )
    server, trace_file = _serve(tmp_path, repository, stopping)
    answer = json.loads(
        _post(
            server, "/v2/models/simple/generate", {"INPUT0": list(range(16)), "INPUT1": [1] * 16, "id": "g"}
        )
    )
    assert answer["OUTPUT0"] == list(range(1, 17))
    events = _post(server, "/v2/models/repeat/generate_stream", {"IN": 2, "id": "s"})
    assert events.count(b"data: ") == 2
    records = _stop_and_read(server, trace_file)
    traces, named = _traces(records), _named(records)
    assert sorted(traces) == [1, 2]
    generated, streamed = traces[1], traces[2]
    assert (generated["model_name"], generated["request_id"]) == ("simple", "g")
    _in_order(generated, MODEL_ORDER)
    _in_order(generated, HTTP_ORDER)
    assert named[1].count("INFER_RESPONSE_COMPLETE") == 1
    assert (streamed["model_name"], streamed["request_id"]) == ("repeat", "s")
    _in_order(streamed, ("HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START"))
    sends = [n for n in named[2] if n in ("INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END")]
    assert sends == ["INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"] * 2 + [
        "INFER_RESPONSE_COMPLETE"
    ]


def _batched_repository(root: Path) -> Path:
    shutil.copytree(EXAMPLES / "simple", root / "batched")
    config = root / "batched" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('name: "simple"', 'name: "batched"') + "\ndynamic_batching { }\n"
    )
    return root


def test_requests_to_a_batching_model_are_traced_on_the_callback_path(
    tmp_path: Path, stopping: list[RunningServer]
) -> None:
    """A dynamic batcher's HTTP requests are answered by callback, with no Task per request; traced, they
    still carry every timestamp, the connection's send times included."""
    root = _batched_repository(tmp_path / "models")
    server, trace_file = _serve(tmp_path, root, stopping)
    for request_id in ("one", "two"):
        _http_infer(server, "batched", request_id=request_id)
    traces = _traces(_stop_and_read(server, trace_file))
    assert sorted(t["request_id"] for t in traces.values()) == ["one", "two"]
    for trace in traces.values():
        _in_order(trace, MODEL_ORDER)
        _in_order(trace, HTTP_ORDER)
        _in_order(trace, ("REQUEST_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START"))


@pytest.mark.parametrize("core", ["--grpc-request-compression=gzip", "--grpc-core=aio"])
def test_grpc_requests_to_a_batching_model_are_traced_on_the_callback_path(
    tmp_path: Path, stopping: list[RunningServer], core: str
) -> None:
    """ModelInfer calls to a dynamic batcher are answered by callback (on the native core with no Task at
    all); traced, they carry every timestamp, from the read of the request to its send."""
    root = _batched_repository(tmp_path / "models")
    server, trace_file = _serve(tmp_path, root, stopping, extra=(core,))
    for _ in range(2):
        _grpc_infer(server, "batched")
    traces = _traces(_stop_and_read(server, trace_file))
    assert len(traces) == 2
    for trace in traces.values():
        assert trace["model_name"] == "batched"
        _in_order(trace, MODEL_ORDER)
        _in_order(trace, GRPC_ORDER)
        _in_order(trace, ("REQUEST_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"))
