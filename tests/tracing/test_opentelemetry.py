"""OpenTelemetry trace mode end to end: Nereid exports spans over OTLP/HTTP to a receiver in this test,
which decodes them with the OTLP protobuf definitions (opentelemetry-proto)."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service

from tests.conftest import RunningServer, free_port, start_nereid, stop
from tests.tracing.test_trace_file import BLS_MODEL, _bls_model, _inputs, _repository

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class _Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver: keeps every span it is sent, with its resource's attributes."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = trace_service.ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    self.server.spans.extend((resource, span) for span in scope_spans.spans)
        answer = trace_service.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def nereid(tmp_path: Path, receiver: _Receiver, request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """Nereid exporting to `receiver`; its BLS model runs in the execution mode given as the parameter."""
    repository = _repository(tmp_path / "models")
    _bls_model(repository, getattr(request, "param", "thread"), BLS_MODEL)
    server = start_nereid(
        repository,
        tmp_path / "nereid.log",
        "--trace-config=mode=opentelemetry",
        f"--trace-config=opentelemetry,url=http://127.0.0.1:{receiver.server_port}/v1/traces",
        "--trace-config=opentelemetry,resource=service.name=nereid-test",
        "--trace-config=opentelemetry,resource=deployment=ci",
        "--trace-config=opentelemetry,bsp_schedule_delay=50",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=0",  # only requests that carry a trace context are traced
        grpc=True,
    )
    try:
        yield server
    finally:
        stop(server.process)


def _events(span: Any) -> list[str]:
    return [event.name for event in span.events]


def test_spans_follow_the_client_context_through_an_ensemble(
    nereid: RunningServer, receiver: _Receiver
) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    with httpclient.InferenceServerClient(nereid.url) as client:
        client.infer("ensemble_simple", _inputs(httpclient, a), headers={"traceparent": traceparent})
        client.infer("simple", _inputs(httpclient, a))  # no context, rate 0: not traced
        settings = dict(client.get_trace_settings())
    assert settings["trace_mode"] == "opentelemetry" and "trace_file" not in settings
    assert settings["url"] == f"http://127.0.0.1:{receiver.server_port}/v1/traces"
    with grpcclient.InferenceServerClient(nereid.grpc_url) as client:
        grpc_parent = f"00-{'1' * 32}-{'2' * 16}-01"
        client.infer("simple", _inputs(grpcclient, a), headers={"traceparent": grpc_parent})
    stop(nereid.process)  # the batch span processor exports the rest at shutdown

    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    spans = [span for _, span in receiver.spans]
    resources = {tuple(sorted(resource.items())) for resource, _ in receiver.spans}
    assert len(resources) == 1
    resource = dict(resources.pop())
    assert (resource["service.name"], resource["deployment"]) == ("nereid-test", "ci")

    by_trace: dict[str, list[Any]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id.hex(), []).append(span)
    assert set(by_trace) == {CLIENT_TRACE, "1" * 32}

    http_spans = {span.name: span for span in by_trace[CLIENT_TRACE]}
    assert sorted(http_spans) == ["InferRequest", "compute", "ensemble_simple", "simple"]
    root, ensemble, step, compute = (
        http_spans[n] for n in ("InferRequest", "ensemble_simple", "simple", "compute")
    )
    assert root.parent_span_id.hex() == CLIENT_SPAN
    assert ensemble.parent_span_id == root.span_id
    assert step.parent_span_id == ensemble.span_id
    assert compute.parent_span_id == step.span_id
    assert _events(root)[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"]
    assert _events(root)[-1] == "HTTP_SEND_END"
    assert _events(ensemble) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert _events(compute) == ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
    attributes = {a.key: _value(a.value) for a in step.attributes}
    assert attributes["triton.model_name"] == "simple" and attributes["triton.model_version"] == 1
    assert (
        attributes["triton.trace_parent_id"]
        == {a.key: _value(a.value) for a in ensemble.attributes}["triton.trace_id"]
    )
    for span in (ensemble, step, compute):
        assert root.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano
        assert span.end_time_unix_nano <= root.end_time_unix_nano

    grpc_spans = {span.name: span for span in by_trace["1" * 32]}
    assert sorted(grpc_spans) == ["InferRequest", "compute", "simple"]
    assert grpc_spans["InferRequest"].parent_span_id.hex() == "2" * 16
    assert "GRPC_WAITREAD_START" in _events(grpc_spans["InferRequest"])


@pytest.mark.parametrize("nereid", ["process", "thread"], indirect=True)
def test_a_bls_call_is_a_child_span_of_its_caller(nereid: RunningServer, receiver: _Receiver) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with httpclient.InferenceServerClient(nereid.url) as client:
        client.infer(
            "bls_simple",
            _inputs(httpclient, a),
            headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
        )
    stop(nereid.process)
    spans = [span for _, span in receiver.spans]
    assert {span.trace_id.hex() for span in spans} == {CLIENT_TRACE}
    named: dict[str, list[Any]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    assert sorted((name, len(group)) for name, group in named.items()) == [
        ("InferRequest", 1),
        ("bls_simple", 1),
        ("compute", 2),
        ("simple", 1),  # the call made without the request's trace is not traced
    ]
    (bls,), (simple,) = named["bls_simple"], named["simple"]
    assert simple.parent_span_id == bls.span_id
    assert {c.parent_span_id for c in named["compute"]} == {bls.span_id, simple.span_id}


def test_missing_sdk_is_named_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from nereid.cli import parse_settings

    real_import = builtins.__import__

    def without_sdk(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry.sdk"):
            raise ImportError(name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_sdk)
    with pytest.raises(SystemExit, match=r"pip install 'nereid\[trace\]'"):
        parse_settings(["--model-repository=/m", "--trace-config=mode=opentelemetry"])
