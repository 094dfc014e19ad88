"""JSON request bodies: documents deeper than orjson reads, and the statuses and texts of bodies Triton's
JSON reader refuses (500, its words) next to those its checks refuse (400)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import orjson
import pytest

from nereid.frontends.http import HttpFrontend, json_body
from nereid.frontends.http.protocol import HttpRequest
from nereid.server import build_engine
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES


def _nested(depth: int, inner: str) -> str:
    return "[" * depth + inner + "]" * depth


def test_documents_deeper_than_orjson_reads_are_read() -> None:
    if not json_body.DEEP_READS:  # before 3.11 the deep read could overflow the C stack: refused instead
        with pytest.raises(orjson.JSONDecodeError, match="depth limit exceeded"):
            json_body.loads(_nested(5000, "true").encode())
        return
    value = json_body.loads(('{"ready":' + _nested(5000, "true") + "}").encode())
    depth, item = 0, value["ready"]
    while isinstance(item, list):
        depth, item = depth + 1, item[0]
    assert (depth, item) == (5000, True)


@pytest.mark.skipif(not json_body.DEEP_READS, reason="before Python 3.11 deep documents are refused whole")
def test_deep_documents_report_errors_as_orjson_does() -> None:
    with pytest.raises(orjson.JSONDecodeError, match="line 1 column"):
        json_body.loads(("[" * 2000 + "]" * 1999).encode())
    too_many = json_body.MAX_DEEP_BRACKETS + 1
    with pytest.raises(orjson.JSONDecodeError, match="depth limit exceeded"):
        json_body.loads(_nested(too_many, "1").encode())


@pytest.fixture(scope="module")
def app() -> Iterator[HttpFrontend]:
    settings = ServerSettings(model_repositories=(EXAMPLES,))
    engine = build_engine(settings)
    try:
        yield HttpFrontend(engine, settings)
    finally:
        engine.shutdown()


def _post(app: HttpFrontend, path: str, body: bytes) -> tuple[int, str]:
    response = asyncio.run(app.handle(HttpRequest("POST", path, "", {}, body)))
    return response.status, orjson.loads(response.body).get("error", "")


def _infer_body(**input_fields: object) -> bytes:
    tensor = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
    tensor.update(input_fields)
    other = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
    return orjson.dumps({"inputs": [tensor, other]})


def test_a_deep_ready_is_refused_as_not_a_boolean(app: HttpFrontend) -> None:
    body = ('{"ready":' + _nested(250_000, "true") + "}").encode()
    if not json_body.DEEP_READS:  # refused by the JSON reader, without a crash
        assert _post(app, "/v2/repository/index", body)[0] == 500
        return
    assert _post(app, "/v2/repository/index", body) == (400, "Invalid value for 'ready': expected a boolean")


def test_deep_tensor_data_is_refused_by_the_nesting_bound(app: HttpFrontend) -> None:
    data = _nested(3000, "1")
    body = _infer_body(data=[]).replace(b'"data":[]', f'"data":{data}'.encode(), 1)
    status, error = _post(app, "/v2/models/simple/infer", body)
    if not json_body.DEEP_READS:  # refused by the JSON reader, without a crash
        assert status == 500
        return
    assert status == 400 and error.startswith("JSON nesting depth exceeds maximum allowed limit (100)")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            _infer_body(shape=[2, -5]),
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            _infer_body(data=["x"] * 16),
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (_infer_body(data="x"), "Unable to parse 'data': attempt to access JSON non-array as array"),
        (b"[1]", "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
        (b'{"inputs": [', None),
    ],
)
def test_what_the_json_reader_refuses_is_an_internal_error(
    app: HttpFrontend, body: bytes, error: str | None
) -> None:
    status, text = _post(app, "/v2/models/simple/infer", body)
    assert status == 500
    if error is None:
        assert text.startswith("failed to parse the request JSON buffer: ")
    else:
        assert text == error


def test_a_malformed_repository_body_is_an_internal_error(app: HttpFrontend) -> None:
    status, error = _post(app, "/v2/repository/index", b'{"ready":')
    assert status == 500 and error.startswith("failed to parse the request JSON buffer: ")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"xx", "failed to parse the request JSON buffer: "),
        (b'{"trace_rate": 5}', "attempt to access JSON non-string as string"),
        (b'{"trace_level": "TIMESTAMPS"}', "attempt to access JSON non-array as array"),
    ],
)
def test_trace_setting_bodies_the_json_reader_refuses_are_internal_errors(
    app: HttpFrontend, body: bytes, error: str
) -> None:
    status, text = _post(app, "/v2/trace/setting", body)
    assert status == 500 and text.startswith(error)
