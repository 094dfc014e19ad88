"""--http-header-forward-pattern / --grpc-header-forward-pattern: matching headers become parameters."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from tritonclient.grpc import service_pb2 as pb

from nereid.cli import parse_settings
from nereid.core.engine import Engine
from nereid.errors import InvalidArgument
from nereid.frontends.header_forward import compile_pattern, header_forwarding
from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest
from nereid.server import build_engine
from nereid.settings import ServerSettings
from nereid.types import InferRequest
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import CORES, serving

HEADERS = [("my_header_1", "one"), ("other", "x"), ("My_Header_2", 'a "quoted" value\\ ')]


def _forwarded(pattern: str, headers: list[tuple[str, Any]], body: dict | None = None) -> dict[str, Any]:
    forwarding = header_forwarding(pattern)
    assert forwarding is not None
    parameters: dict[str, Any] = dict(body or {})
    forwarding.add_parameters(headers, parameters)
    return parameters


def test_the_pattern_ignores_case_unless_told_not_to() -> None:
    assert _forwarded("MY_HEADER.*", HEADERS) == {"my_header_1": "one", "my_header_2": 'a "quoted" value\\ '}
    assert _forwarded("(?-i)MY_HEADER.*", HEADERS) == {}
    assert _forwarded("(?-i)my_header", HEADERS) == {"my_header_1": "one"}


def test_body_parameters_win_and_binary_metadata_is_left_out() -> None:
    assert _forwarded("my_.*", [("my_key", "header"), ("my_bin", b"\x00")], {"my_key": 7}) == {"my_key": 7}


@pytest.mark.parametrize("name", ["priority", "sequence_id", "triton_enable_empty_final_response"])
def test_reserved_keys_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="reserved for Triton usage"):
        _forwarded(".*", [(name, "1")])


def test_the_flags_are_parsed_and_bad_patterns_refused() -> None:
    settings, warnings = parse_settings(
        ["--model-repository=/m", "--http-header-forward-pattern", "a.*", "--grpc-header-forward-pattern=b"]
    )
    assert (settings.http_header_forward_pattern, settings.grpc_header_forward_pattern) == ("a.*", "b")
    assert not warnings
    with pytest.raises(SystemExit, match="not a valid regular expression"):
        parse_settings(["--model-repository=/m", "--http-header-forward-pattern=("])
    assert compile_pattern("(?i)X").search("x")


class _Recording:
    """Wraps an engine's infer_queued, which every unary request goes through (`infer` too), to keep the
    requests the frontend built."""

    def __init__(self, engine: Engine) -> None:
        self.requests: list[InferRequest] = []
        infer_queued = engine.infer_queued

        def recording_queued(request: InferRequest) -> Any:
            self.requests.append(request)
            return infer_queued(request)

        engine.infer_queued = recording_queued  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def settings() -> ServerSettings:
    return ServerSettings(
        model_repositories=(EXAMPLES,),
        http_header_forward_pattern="^x-model-",
        grpc_header_forward_pattern="^x-model-",
        grpc_address="127.0.0.1",
        grpc_port=0,
    )


@pytest.fixture(scope="module")
def engine(settings: ServerSettings) -> Iterator[Engine]:
    engine = build_engine(settings)
    try:
        yield engine
    finally:
        engine.shutdown()


SIMPLE_INPUTS = [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
]


def test_http_requests_carry_matching_headers(engine: Engine, settings: ServerSettings) -> None:
    recording = _Recording(engine)
    app = HttpFrontend(engine, settings)
    body = orjson.dumps({"inputs": SIMPLE_INPUTS})
    headers = {"x-model-tenant": "blue", "x-other": "no", "content-type": "application/json"}
    response = asyncio.run(app.handle(HttpRequest("POST", "/v2/models/simple/infer", "", headers, body)))
    assert response.status == 200
    assert recording.requests[-1].parameters == {"x-model-tenant": "blue"}


@pytest.mark.parametrize("core", sorted(CORES))
def test_grpc_requests_and_streams_carry_matching_metadata(
    engine: Engine, settings: ServerSettings, core: str
) -> None:
    recording = _Recording(engine)
    with serving(engine, dataclasses.replace(settings, grpc=CORES[core])) as served:
        request = pb.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            request.raw_input_contents.append(np.ones(16, np.int32).tobytes())
        metadata = (("x-model-tenant", "green"), ("x-other", "no"))
        served.stub.ModelInfer(request, metadata=metadata)
        assert recording.requests[-1].parameters == {"x-model-tenant": "green"}
        # laid out as the first: decoded from its bytes alone where the core keeps them
        served.stub.ModelInfer(request, metadata=(("x-model-tenant", "blue"),))
        assert recording.requests[-1].parameters == {"x-model-tenant": "blue"}
        served.stub.ModelInfer(request)
        assert recording.requests[-1].parameters == {}
        responses = list(served.stub.ModelStreamInfer(iter([request]), metadata=metadata))
        assert not responses[0].error_message
        assert recording.requests[-1].parameters == {"x-model-tenant": "green"}
        assert len(recording.requests) == 4
