"""The same requests, good and bad, sent to the real Triton and to Nereid: same status, same JSON shape.

Cases live in cases.json so later features add rows, not code. A case may say why Nereid answers
differently on purpose (`nereid_status`, `error`, `ignore`, `why`).
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import orjson
import pytest
from onnx import TensorProto, helper

from tests.conftest import EXAMPLES, free_port, start_nereid, stop, wait_ready
from tests.differential.real_triton import triton_command

HERE = Path(__file__).parent
CASES = json.loads((HERE / "cases.json").read_text())

pytestmark = pytest.mark.differential


def _identity_model(path: Path, dtype: int, shape: list[Any]) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", dtype, shape)],
        [helper.make_tensor_value_info("OUTPUT0", dtype, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def nereid_repository(root: Path) -> Path:
    """ONNX versions of the twins: the bundled examples plus two identity models."""
    for name in ("simple", "simple_int8", "simple_string"):
        shutil.copytree(EXAMPLES / name, root / name)
    _identity_model(root / "simple_identity" / "1" / "model.onnx", TensorProto.STRING, ["batch", "n"])
    (root / "simple_identity" / "config.pbtxt").write_text(
        'name: "simple_identity"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    _identity_model(root / "simple_labels" / "1" / "model.onnx", TensorProto.FLOAT, [4])
    shutil.copy(HERE / "triton_twins" / "simple_labels" / "labels.txt", root / "simple_labels" / "labels.txt")
    (root / "simple_labels" / "config.pbtxt").write_text(
        'name: "simple_labels"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]\n'
    )
    return root


@contextmanager
def server_pair(
    base: Path, *flags: str, triton_flags: tuple[str, ...] = (), nereid_flags: tuple[str, ...] = ()
) -> Iterator[tuple[str, str]]:
    """The real Triton on the Python twins and Nereid on their ONNX versions, both with `flags`."""
    twins = base / "twins"
    shutil.copytree(HERE / "triton_twins", twins)
    port = free_port()
    command, env = triton_command(twins, port)
    log = (base / "triton.log").open("wb")
    triton = subprocess.Popen(
        [*command, *flags, *triton_flags], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    nereid = None
    try:
        wait_ready(f"127.0.0.1:{port}", triton, timeout=120)
        nereid = start_nereid(
            nereid_repository(base / "nereid_repository"), base / "nereid.log", *flags, *nereid_flags
        )
        yield f"127.0.0.1:{port}", nereid.url
    finally:
        stop(triton)
        if nereid is not None:
            stop(nereid.process)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with server_pair(tmp_path_factory.mktemp("differential")) as urls:
        yield urls


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


def _same_shape(triton: Any, nereid: Any, path: str, ignore: set[str], any_number: bool = False) -> None:
    """Same keys, same JSON types, same values (numbers compared as float32, or not at all)."""
    if isinstance(triton, dict):
        assert isinstance(nereid, dict), f"{path}: Triton has an object, Nereid {nereid!r}"
        keys_t = {k for k in triton if k not in ignore}
        keys_n = {k for k in nereid if k not in ignore}
        assert keys_t == keys_n, f"{path}: keys differ: Triton {sorted(keys_t)}, Nereid {sorted(keys_n)}"
        for key in keys_t:
            _same_shape(triton[key], nereid[key], f"{path}.{key}", ignore, any_number)
    elif isinstance(triton, list):
        assert isinstance(nereid, list) and len(nereid) == len(triton), f"{path}: {triton!r} vs {nereid!r}"
        for i, (a, b) in enumerate(zip(triton, nereid, strict=False)):
            _same_shape(a, b, f"{path}[{i}]", ignore, any_number)
    elif isinstance(triton, bool) or isinstance(triton, str):
        assert triton == nereid, f"{path}: Triton {triton!r}, Nereid {nereid!r}"
    elif isinstance(triton, (int, float)):
        assert isinstance(nereid, (int, float)) and not isinstance(nereid, bool), f"{path}: {nereid!r}"
        assert any_number or np.float32(triton) == np.float32(nereid), (
            f"{path}: Triton {triton!r}, Nereid {nereid!r}"
        )
    else:
        assert triton == nereid, f"{path}: Triton {triton!r}, Nereid {nereid!r}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_answer(servers: tuple[str, str], case: dict[str, Any]) -> None:
    compare(*servers, case)


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
        _same_shape(t_json, n_json, "$", set(case.get("ignore", [])), case.get("numbers") == "any")
    except AssertionError as exc:
        first = str(exc).splitlines()[0]
        raise AssertionError(f"{first}; Triton {t_json!r:.600}, Nereid {n_json!r:.600}") from None
    assert t_tail == n_tail, "binary tensor data differs"


def _same_error(case: dict[str, Any], triton: Any, nereid: Any) -> None:
    if triton is None:
        assert nereid is None, f"Triton answers with no body, Nereid with {nereid!r}"
        return
    assert isinstance(nereid, dict) and set(nereid) == {"error"}, f"Nereid error body {nereid!r}"
    mode = case.get("error", "exact")
    if mode == "exact":
        assert nereid["error"] == triton["error"]
    elif mode.startswith("prefix:"):
        assert nereid["error"].startswith(mode[len("prefix:") :]), nereid["error"]
    elif mode.startswith("contains:"):
        assert mode[len("contains:") :] in nereid["error"], nereid["error"]
        assert mode[len("contains:") :] in triton["error"], triton["error"]
    else:
        assert mode == "differs", f"unknown error mode {mode!r}"
        assert nereid["error"], "an error needs a message"
