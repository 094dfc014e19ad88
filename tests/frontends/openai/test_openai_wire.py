"""The OpenAI API on the wire: server-sent events framing, error shapes and status codes, cancellation,
the restricted-API group, a port of its own, and the switch that turns the routes off."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningServer, free_port, start_nereid, stop
from tests.frontends.openai.conftest import TEST_MODELS


def _post(
    url: str, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body, {"content-type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _get(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, bytes]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _error(body: bytes) -> dict[str, object]:
    document = json.loads(body)
    assert set(document) == {"error"}
    error = document["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def _events(body: bytes) -> list[bytes]:
    """The events of a body, checked to be `data: ...` lines each followed by a blank line."""
    assert body.endswith(b"\n\n")
    events = body[:-2].split(b"\n\n")
    assert all(event.startswith(b"data: ") and b"\n" not in event for event in events)
    return [event[len(b"data: ") :] for event in events]


def test_stream_framing(openai_server: RunningServer) -> None:
    body = json.dumps(
        {"model": "tiny_chat", "messages": [{"role": "user", "content": "a b"}], "stream": True}
    )
    status, headers, raw = _post(openai_server.url, "/v1/chat/completions", body.encode())
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = _events(raw)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert [chunk["choices"][0]["delta"] for chunk in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "a"},
        {"content": " b"},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_completion_stream_framing(openai_server: RunningServer) -> None:
    body = json.dumps({"model": "tiny_chat", "prompt": "p q", "stream": True, "echo": True})
    status, _, raw = _post(openai_server.url, "/v1/completions", body.encode())
    events = _events(raw)
    assert status == 200 and events[-1] == b"[DONE]"
    texts = [json.loads(event)["choices"][0]["text"] for event in events[:-1]]
    assert texts == ["p q", "p", " q", ""]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b"[1, 2]", 400, None),
        ("/v1/chat/completions", b'{"messages": []}', 400, "model"),
        ("/v1/chat/completions", b'{"model": "tiny_chat", "messages": []}', 400, "messages"),
        (
            "/v1/chat/completions",
            b'{"model": "tiny_chat", "messages": [{"role": "robot", "content": "x"}]}',
            400,
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "tiny_chat", "messages": [{"role": "user", "content": 5}]}',
            400,
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "tiny_chat", "messages": [{"role": "user", "content": "x"}], "n": 0}',
            400,
            "n",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "tiny_chat", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}',
            400,
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "tiny_chat", "messages": [{"role": "user", "content": "x"}], "logit_bias": {}}',
            400,
            "logit_bias",
        ),
        ("/v1/completions", b'{"model": "tiny_chat", "prompt": 7}', 400, "prompt"),
        ("/v1/completions", b'{"model": "tiny_chat", "prompt": "x", "stop": [1]}', 400, "stop"),
        ("/v1/completions", b'{"model": "tiny_chat", "prompt": "x", "max_tokens": -1}', 400, "max_tokens"),
        ("/v1/embeddings", b'{"model": "tiny_embed", "input": {}}', 400, "input"),
        (
            "/v1/embeddings",
            b'{"model": "tiny_embed", "input": "x", "encoding_format": "hex"}',
            400,
            "encoding_format",
        ),
        ("/v1/embeddings", b'{"model": "missing", "input": "x"}', 404, "model"),
    ],
)
def test_error_shapes(
    openai_server: RunningServer, path: str, body: bytes, status: int, param: str | None
) -> None:
    got, headers, raw = _post(openai_server.url, path, body)
    assert got == status
    assert headers["content-type"] == "application/json"
    error = _error(raw)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_routes_and_methods(openai_server: RunningServer) -> None:
    status, raw = _get(openai_server.url, "/v1/no_such_route")
    assert status == 404 and _error(raw)["code"] == "unknown_url"
    status, _ = _get(openai_server.url, "/v1/chat/completions")
    assert status == 405  # the HTTP port's route table answers it, as for every route
    status, raw = _get(openai_server.url, "/v1/models/no_such_model")
    assert status == 404 and _error(raw)["code"] == "model_not_found"
    status, raw = _get(openai_server.url, "/v1/models")
    assert status == 200 and json.loads(raw)["object"] == "list"


def test_model_failure_is_500_before_the_stream_and_an_event_after(openai_server: RunningServer) -> None:
    status, _, raw = _post(openai_server.url, "/v1/completions", b'{"model": "broken", "prompt": ""}')
    assert status == 500
    error = _error(raw)
    assert error["type"] == "server_error" and "the model failed" in str(error["message"])
    status, _, raw = _post(
        openai_server.url, "/v1/completions", b'{"model": "broken", "prompt": " ", "stream": true}'
    )
    assert status == 500  # failed before its first piece: an ordinary answer
    status, _, raw = _post(
        openai_server.url, "/v1/completions", b'{"model": "broken", "prompt": "go", "stream": true}'
    )
    events = _events(raw)
    assert status == 200
    assert json.loads(events[0])["choices"][0]["text"] == "partial"
    assert "the model failed" in str(_error(events[1])["message"])
    assert events[2:] == [b"[DONE]"]


def test_a_client_that_leaves_cancels_its_stream(openai_server: RunningServer) -> None:
    marker = Path(openai_server.repository) / "endless" / "1" / "cancelled"  # type: ignore[attr-defined]
    host, port = openai_server.url.split(":")
    body = b'{"model": "endless", "prompt": "go", "stream": true}'
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while b"tick" not in received:
            received += client.recv(4096)
        assert received.startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the model notices the cancellation at its next piece
    assert marker.read_text() == "yes"


def test_oversized_body_is_refused_as_on_the_v2_routes(openai_server: RunningServer) -> None:
    # the server's --http-max-input-size (64 MiB by default) applies to /v1 as to every route: a body
    # declared larger is refused before it is read
    host, port = openai_server.url.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % (64 * 1024 * 1024 + 1)
        )
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            chunk = client.recv(4096)
            if not chunk:
                break
            received += chunk
    assert received.startswith(b"HTTP/1.1 400")
    assert b"--http-max-input-size" in received


@pytest.fixture(scope="module")
def restricted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, int]]:
    """/v1 on a port of its own, behind the `openai` group's header."""
    base = tmp_path_factory.mktemp("openai_restricted")
    repository = base / "model_repository"
    repository.mkdir()
    import shutil

    shutil.copytree(TEST_MODELS / "whole_text", repository / "whole_text")
    port = free_port()
    server = start_nereid(
        repository,
        base / "nereid.log",
        f"--openai-port={port}",
        "--http-restricted-api=openai:x-openai-key=secret",
    )
    try:
        yield server, port
    finally:
        stop(server.process)


def test_restricted_group_and_a_port_of_its_own(restricted_server: tuple[RunningServer, int]) -> None:
    server, port = restricted_server
    own = f"127.0.0.1:{port}"
    status, raw = _get(own, "/v1/models")
    assert status == 403 and _error(raw)["type"] == "permission_error"
    status, raw = _get(own, "/v1/models", {"x-openai-key": "secret"})
    assert status == 200 and [m["id"] for m in json.loads(raw)["data"]] == ["whole_text"]
    body = b'{"model": "whole_text", "prompt": "abc"}'
    status, _, raw = _post(own, "/v1/completions", body, {"x-openai-key": "secret"})
    assert status == 200 and json.loads(raw)["choices"][0]["text"] == "ABC"
    # the HTTP port serves the v2 API only, the v2 routes unrestricted
    status, _ = _get(server.url, "/v1/models", {"x-openai-key": "secret"})
    assert status == 404
    status, _ = _get(server.url, "/v2/models/whole_text/config")
    assert status == 200
    # that port's own table answers unknown routes and methods in OpenAI's shape
    status, raw = _get(own, "/v1/chat/completions", {"x-openai-key": "secret"})
    assert status == 405 and "POST" in str(_error(raw)["message"])
    status, raw = _get(own, "/v2/models", {"x-openai-key": "secret"})
    assert status == 404 and _error(raw)["code"] == "unknown_url"
    # the HTTP layer's refusals on that port come in OpenAI's shape
    status, raw = _get(own, "/v1/models", {"x-openai-key": "secret", "content-length": "abc"})
    assert status == 400 and _error(raw)


def test_allow_openai_false_turns_the_routes_off(tmp_path: Path) -> None:
    repository = tmp_path / "model_repository"
    repository.mkdir()
    server = start_nereid(repository, tmp_path / "nereid.log", "--allow-openai=false")
    try:
        status, _ = _get(server.url, "/v1/models")
        assert status == 404
    finally:
        stop(server.process)


def test_restricted_group_on_the_http_port(tmp_path: Path) -> None:
    """With the header `authorization` the client's API key is the key: `Bearer <key>` is what it sends."""
    import shutil

    import openai

    repository = tmp_path / "model_repository"
    shutil.copytree(TEST_MODELS / "whole_text", repository / "whole_text")
    server = start_nereid(
        repository, tmp_path / "nereid.log", "--http-restricted-api=openai:authorization=Bearer s3cret"
    )
    try:
        status, raw = _get(server.url, "/v1/models")
        assert status == 403 and b"expecting header 'authorization'" in raw
        status, _ = _get(server.url, "/v1/unknown")
        assert status == 403  # every /v1 path is in the group
        status, _ = _get(server.url, "/v2/models/whole_text/config")
        assert status == 200  # the v2 API is not
        base_url = f"http://{server.url}/v1"
        client = openai.OpenAI(base_url=base_url, api_key="s3cret", max_retries=0)
        assert [model.id for model in client.models.list()] == ["whole_text"]
        intruder = openai.OpenAI(base_url=base_url, api_key="guess", max_retries=0)
        with pytest.raises(openai.PermissionDeniedError):
            intruder.completions.create(model="whole_text", prompt="x")
    finally:
        stop(server.process)
