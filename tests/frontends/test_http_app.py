"""The ASGI app in process: limits, methods, compression errors, raw binary bodies."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest

from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest
from nereid.server import build_engine
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES

BODY = orjson.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
)


@pytest.fixture(scope="module")
def app() -> Iterator[HttpFrontend]:
    settings = ServerSettings(model_repositories=(EXAMPLES,), http_max_input_size=4096)
    engine = build_engine(settings)
    try:
        yield HttpFrontend(engine, settings)
    finally:
        engine.shutdown()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def _call(app: HttpFrontend, method: str, path: str, body: bytes = b"", **headers: str) -> Answer:
    request = HttpRequest(method, path, "", {k.replace("_", "-"): v for k, v in headers.items()}, body)
    response = asyncio.run(app.handle(request))
    return Answer(response.status, {k.decode(): v.decode() for k, v in response.headers}, response.body)


def test_infer_and_response_compression(app: HttpFrontend) -> None:
    plain = _call(app, "POST", "/v2/models/simple/infer", BODY)
    assert plain.status == 200
    assert plain.json()["outputs"][0]["data"] == list(range(1, 17))
    packed = _call(
        app,
        "POST",
        "/v2/models/simple/infer",
        gzip.compress(BODY),
        content_encoding="gzip",
        accept_encoding="gzip",
    )
    assert packed.headers["content-encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(packed.body)) == plain.json()
    # only infer responses are compressed, as in Triton
    metadata = _call(app, "GET", "/v2/models/simple", accept_encoding="gzip")
    assert "content-encoding" not in metadata.headers and metadata.json()["name"] == "simple"


def test_body_limits(app: HttpFrontend) -> None:
    # the connection refuses bodies over the limit as they arrive; a compressed one is checked here
    bomb = gzip.compress(b" " * 100_000)
    inflated = _call(app, "POST", "/v2/models/simple/infer", bomb, content_encoding="gzip")
    assert inflated.status == 400 and "--http-max-input-size" in inflated.json()["error"]
    unknown = _call(app, "POST", "/v2/models/simple/infer", BODY, content_encoding="br")
    assert unknown.status == 501


def test_methods_and_routes(app: HttpFrontend) -> None:
    assert _call(app, "GET", "/v2/models/simple/infer").status == 405
    assert _call(app, "POST", "/v2").status == 405
    assert _call(app, "GET", "/v2/models/simple/versions/x").json() == {"error": "Not Found"}
    assert _call(app, "GET", "/v2/trace/setting").status == 200
    assert _call(app, "PUT", "/v2/trace/setting").status == 405
    assert _call(app, "GET", "/v2/logging").json()["log_verbose_level"] == 0
    assert _call(app, "PUT", "/v2/logging").status == 405
    assert _call(app, "GET", "/v2/models/simple/versions/1/trace/setting").status == 404  # no versions
    assert _call(app, "POST", "/v2/models/stats").status == 405


def test_raw_binary_body_and_binary_output(app: HttpFrontend) -> None:
    x = np.array([1.0, 5.0, 2.0, 0.0], dtype=np.float32)
    response = _call(
        app, "POST", "/v2/models/simple_classifier/infer", x.tobytes(), inference_header_content_length="0"
    )
    assert response.status == 200
    length = int(response.headers["inference-header-content-length"])
    header = orjson.loads(response.body[:length])
    assert header["outputs"][0]["shape"] == [1, 4]
    probabilities = np.frombuffer(response.body[length:], dtype=np.float32)
    np.testing.assert_allclose(probabilities, np.exp(x) / np.exp(x).sum(), rtol=1e-6)


def test_server_keeps_serving_after_garbage(app: HttpFrontend) -> None:
    # Triton reports a body it cannot read as JSON, or a member of the wrong JSON type, as an internal error
    for body in (b"\xff\x00", b"[]", b'{"inputs": 3}', b'{"inputs": [{"name": 1}]}'):
        assert _call(app, "POST", "/v2/models/simple/infer", body).status == 500
    assert _call(app, "POST", "/v2/models/simple/infer", BODY).status == 200
