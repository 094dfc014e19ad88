"""The same requests, good and bad, sent to the real Triton and to Nereid: same status, same JSON shape.

Cases live in cases.json so later features add rows, not code. A case may say why Nereid answers
differently on purpose (`nereid_status`, `error`, `ignore`, `why`).
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import orjson
import pytest

from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import HERE, Servers, server_pair

__all__ = ["HERE", "compare", "server_pair"]  # the step-by-step differential modules use these

CASES = json.loads((HERE / "cases.json").read_text())
HTTP_CASES = [case for case in CASES if "path" in case]  # the others are gRPC requests with no HTTP form

pytestmark = pytest.mark.differential


def _send(url: str, case: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    headers = dict(case.get("headers", {}))
    body: bytes | None = None
    if "json" in case:
        body = orjson.dumps(case["json"])
    elif "raw" in case:
        body = case["raw"].encode()
    elif "raw_hex" in case:
        body = bytes.fromhex(case["raw_hex"])
    elif "binary" in case:
        header = orjson.dumps(case["binary"]["json"])
        body = header + bytes.fromhex(case["binary"]["tail_hex"])
        headers.setdefault("Inference-Header-Content-Length", str(len(header)))
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(case["method"], case["path"], body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _split(headers: dict[str, str], body: bytes) -> tuple[Any, bytes]:
    """(JSON part, binary tail) of a response body."""
    if not body:
        return None, b""
    length = headers.get("inference-header-content-length")
    if length is not None:
        return orjson.loads(body[: int(length)]), body[int(length) :]
    return orjson.loads(body), b""


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c["name"] for c in HTTP_CASES])
def test_same_answer(servers: Servers, case: dict[str, Any]) -> None:
    compare(servers.triton_http, servers.nereid_http, case)


def compare(triton_url: str, nereid_url: str, case: dict[str, Any]) -> None:
    """Send `case` to both servers; assert the same status and the same JSON shape or error."""
    t_status, t_headers, t_body = _send(triton_url, case)
    deadline = time.monotonic() + 30
    # `settle`: Triton answers unload while the model is still UNLOADING; Nereid once it is done.
    while case.get("settle") and b"UNLOADING" in t_body and time.monotonic() < deadline:
        time.sleep(0.1)
        t_status, t_headers, t_body = _send(triton_url, case)
    n_status, n_headers, n_body = _send(nereid_url, case)
    assert n_status == case.get("nereid_status", t_status), (
        f"status: Triton {t_status} {t_body[:300]!r}, Nereid {n_status} {n_body[:300]!r}"
    )
    t_json, t_tail = _split(t_headers, t_body)
    n_json, n_tail = _split(n_headers, n_body)
    if t_status >= 400 or n_status >= 400:
        _same_error(case, t_json, n_json)
        return
    try:
        same_shape(t_json, n_json, "$", set(case.get("ignore", [])), case.get("numbers") == "any")
    except AssertionError as exc:
        first = str(exc).splitlines()[0]
        raise AssertionError(f"{first}; Triton {t_json!r:.600}, Nereid {n_json!r:.600}") from None
    assert t_tail == n_tail, "binary tensor data differs"


def _same_error(case: dict[str, Any], triton: Any, nereid: Any) -> None:
    if triton is None:
        assert nereid is None, f"Triton answers with no body, Nereid with {nereid!r}"
        return
    assert isinstance(nereid, dict) and set(nereid) == {"error"}, f"Nereid error body {nereid!r}"
    same_message(case.get("error", "exact"), triton.get("error", ""), nereid["error"])
