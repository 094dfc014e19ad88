"""The Python ceiling for HTTP inference: a bare ASGI app under uvicorn (uvloop, httptools, no access log)
that answers KServe v2 binary infer requests for one model (`add_sub` of the Python examples, or
`simple`) with a fixed binary response, no model and no checks beyond parsing the JSON header. It
answers the model's metadata and config too, which perf_analyzer reads before it starts.

    python bench/http_infer_echo_app.py PORT [add_sub|simple] [PROCESSES] [uvicorn|nereid|granian]

PROCESSES (default 1) runs that many uvicorn worker processes sharing the port: what a Python server
gains from more than one process on the machine at hand.

The last argument picks the HTTP layer under the same answers (one process): `uvicorn` (the default,
ASGI), `nereid` (Nereid's own HTTP/1.1 protocol, nereid.frontends.http.protocol, with a handler that
answers at once: the floor under Nereid's HTTP frontend) or `granian` (the Rust HTTP server, RSGI,
embedded in this process's uvloop loop; `pip install granian`). These two also answer
/v2/models/MODEL/stats with the count of infer requests answered, so that their CPU per request can be
measured as a server's (bench/cpu.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvicorn

# model -> (data type, max_batch_size, its two outputs for INPUT0 = 0..15 and INPUT1 = ones)
MODELS = {
    "add_sub": ("FP32", 64, (np.arange(1, 17, dtype="<f4"), np.arange(-1, 15, dtype="<f4"))),
    "simple": ("INT32", 8, (np.arange(1, 17, dtype="<i4"), np.arange(-1, 15, dtype="<i4"))),
}
INPUTS, OUTPUTS = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")


def answers(model: str) -> tuple[bytes, bytes, bytes, bytes]:
    """The model's metadata and config (JSON), and its infer response: JSON header, then binary outputs."""
    datatype, max_batch_size, outputs = MODELS[model]
    metadata = {
        "name": model,
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": n, "datatype": datatype, "shape": [-1, 16]} for n in INPUTS],
        "outputs": [{"name": n, "datatype": datatype, "shape": [-1, 16]} for n in OUTPUTS],
    }
    config = {
        "name": model,
        "backend": "python",
        "max_batch_size": max_batch_size,
        "input": [{"name": n, "data_type": f"TYPE_{datatype}", "dims": [16]} for n in INPUTS],
        "output": [{"name": n, "data_type": f"TYPE_{datatype}", "dims": [16]} for n in OUTPUTS],
    }
    header = {
        "model_name": model,
        "model_version": "1",
        "outputs": [
            {"name": n, "datatype": datatype, "shape": [1, 16], "parameters": {"binary_data_size": o.nbytes}}
            for n, o in zip(OUTPUTS, outputs, strict=True)
        ],
    }
    head = orjson.dumps(header)
    return orjson.dumps(metadata), orjson.dumps(config), head, head + b"".join(o.tobytes() for o in outputs)


MODEL = sys.argv[2] if len(sys.argv) > 2 else "add_sub"
METADATA, CONFIG, HEAD, RESPONSE = answers(MODEL)
JSON = [(b"content-type", b"application/json")]
BINARY = [
    (b"content-type", b"application/octet-stream"),
    (b"inference-header-content-length", str(len(HEAD)).encode()),
]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    path: str = scope["path"]
    headers, body = JSON, b"{}"
    if path.endswith("/infer"):
        length = next((int(v) for k, v in scope["headers"] if k == b"inference-header-content-length"), None)
        data = b"".join(chunks)
        orjson.loads(data[:length] if length is not None else data)  # what any real server must do
        headers, body = BINARY, RESPONSE
    elif path.endswith("/config"):
        body = CONFIG
    elif path.startswith("/v2/models/"):
        body = METADATA
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_answered = 0  # infer requests, for the stats answer of the nereid and granian cores


def _answer(path: str, header_length: str | None, body: bytes) -> tuple[int, bytes]:
    """Which answer a path gets (0 JSON, 1 binary infer response), and its body."""
    global _answered
    if path.endswith("/infer"):
        _answered += 1
        orjson.loads(body[: int(header_length)] if header_length is not None else body)
        return 1, RESPONSE
    if path.endswith("/stats"):
        stats = {"inference_stats": {"success": {"count": _answered}}}
        return 0, orjson.dumps(
            {"model_stats": [{**stats, "inference_count": _answered, "execution_count": _answered}]}
        )
    return 0, CONFIG if path.endswith("/config") else METADATA


def serve_nereid(port: int) -> None:
    import asyncio

    import uvloop

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from nereid.frontends.http import error_response
    from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer

    async def handler(request: HttpRequest) -> HttpResponse:
        binary, body = _answer(
            request.path, request.headers.get("inference-header-content-length"), request.body
        )
        return HttpResponse(200, body, BINARY if binary else JSON)

    async def main() -> None:
        await HttpServer(handler, error_response, 1 << 26).start("127.0.0.1", port)
        await asyncio.Event().wait()

    uvloop.run(main())


def serve_granian(port: int) -> None:
    import uvloop
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server

    headers = {id(h): [(k.decode(), v.decode()) for k, v in h] for h in (JSON, BINARY)}

    async def rsgi(scope: Any, protocol: Any) -> None:
        body = await protocol()
        binary, answer = _answer(scope.path, scope.headers.get("inference-header-content-length"), body)
        protocol.response_bytes(200, headers[id(BINARY if binary else JSON)], answer)

    server = Server(
        rsgi,
        address="127.0.0.1",
        port=port,
        interface=Interfaces.RSGI,
        http=HTTPModes.http1,
        log_enabled=False,
    )
    uvloop.run(server.serve())


if __name__ == "__main__":
    core = sys.argv[4] if len(sys.argv) > 4 else "uvicorn"
    if core == "nereid":
        serve_nereid(int(sys.argv[1]))
        sys.exit(0)
    if core == "granian":
        serve_granian(int(sys.argv[1]))
        sys.exit(0)
    processes = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # for the workers, which import this module
    uvicorn.run(
        "http_infer_echo_app:app" if processes > 1 else app,
        workers=processes if processes > 1 else None,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )
