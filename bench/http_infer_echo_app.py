"""The Python ceiling for HTTP inference: a bare ASGI app under uvicorn (uvloop, httptools, no access log)
that answers KServe v2 binary infer requests for one model (`add_sub` of the Python examples, or
`simple`) with a fixed binary response, no model and no checks beyond parsing the JSON header. It
answers the model's metadata and config too, which perf_analyzer reads before it starts.

    python bench/http_infer_echo_app.py PORT [add_sub|simple] [PROCESSES]

PROCESSES (default 1) runs that many uvicorn worker processes sharing the port: what a Python server
gains from more than one process on the machine at hand.
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


if __name__ == "__main__":
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
