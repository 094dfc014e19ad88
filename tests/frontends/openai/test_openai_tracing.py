"""OpenAI requests are traced like any other: the HTTP receive and send times, the model's timestamps, and
for a stream each response's INFER_RESPONSE_COMPLETE and send times."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

from tests.conftest import RunningServer, start_nereid, stop
from tests.frontends.openai.conftest import EXAMPLE, TEST_MODELS
from tests.tracing.test_trace_file import HTTP_ORDER, MODEL_ORDER, _in_order, _named, _read, _traces


def _post(server: RunningServer, path: str, body: dict[str, object]) -> bytes:
    request = urllib.request.Request(f"http://{server.url}{path}", json.dumps(body).encode())
    with urllib.request.urlopen(request) as response:
        return bytes(response.read())


def test_chat_and_completions_are_traced(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(EXAMPLE / "model_repository" / "tiny_chat", repository / "tiny_chat")
    shutil.copytree(TEST_MODELS / "whole_text", repository / "whole_text")
    trace_file = tmp_path / "trace.json"
    flags = (
        f"--trace-config=triton,file={trace_file}",
        "--trace-config=rate=1",
        "--trace-config=level=TIMESTAMPS",
    )
    server = start_nereid(repository, tmp_path / "nereid.log", *flags)
    try:
        whole = json.loads(_post(server, "/v1/completions", {"model": "whole_text", "prompt": "abc"}))
        events = _post(
            server,
            "/v1/chat/completions",
            {"model": "tiny_chat", "messages": [{"role": "user", "content": "a b"}], "stream": True},
        )
    finally:
        stop(server.process)
    assert whole["choices"][0]["text"] == "ABC"
    assert events.endswith(b"data: [DONE]\n\n")
    records = _read(trace_file)
    traces, named = _traces(records), _named(records)
    assert sorted(traces) == [1, 2]
    completion, chat = traces[1], traces[2]
    assert completion["model_name"] == "whole_text" and completion["request_id"] == whole["id"]
    _in_order(completion, MODEL_ORDER)
    _in_order(completion, HTTP_ORDER)
    assert chat["model_name"] == "tiny_chat" and chat["request_id"].startswith("chatcmpl-")
    _in_order(chat, ("HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START"))
    # two words and the final response (which carries the finish reason): each recorded as it came
    assert named[2].count("INFER_RESPONSE_COMPLETE") == 3
    assert named[2].count("HTTP_SEND_START") >= 3
