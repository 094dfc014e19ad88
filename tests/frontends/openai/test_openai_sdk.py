"""The OpenAI API driven by OpenAI's own Python client, sync and async, against a real server."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request

import numpy as np
import openai
import pytest

from tests.conftest import RunningServer


def _client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def _async_client(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=30)


def _success_count(server: RunningServer, model: str) -> int:
    with urllib.request.urlopen(f"http://{server.url}/v2/models/{model}/stats") as response:
        stats = json.load(response)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


USER = [{"role": "user", "content": "hello there world"}]


def test_models_lists_every_model_that_serves_a_route(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    models = {model.id: model for model in client.models.list()}
    assert set(models) == {"tiny_chat", "tiny_embed", "whole_text", "token_embed", "endless", "broken"}
    assert all(model.owned_by == "nereid" and model.created > 0 for model in models.values())
    one = client.models.retrieve("tiny_chat")
    assert (one.id, one.object, one.created) == ("tiny_chat", "model", models["tiny_chat"].created)
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no_such_model")


def test_chat_answers_whole_and_counts_in_statistics(openai_server: RunningServer) -> None:
    before = _success_count(openai_server, "tiny_chat")
    completion = _client(openai_server).chat.completions.create(model="tiny_chat", messages=USER)
    choice = completion.choices[0]
    assert choice.message.content == "hello there world"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert choice.logprobs is None  # not asked for
    assert completion.id.startswith("chatcmpl-") and completion.model == "tiny_chat"
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    assert _success_count(openai_server, "tiny_chat") == before + 1


def test_chat_streams_pieces_with_usage_last(openai_server: RunningServer) -> None:
    stream = _client(openai_server).chat.completions.create(
        model="tiny_chat",
        messages=[{"role": "system", "content": "be brief"}, *USER],
        stream=True,
        max_tokens=5,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello there world hello there"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_sampling_fields_reach_the_model(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    stopped = client.chat.completions.create(
        model="tiny_chat", messages=USER, stop=["world"], seed=3, top_p=0.5
    )
    assert stopped.choices[0].message.content == "hello there"
    assert stopped.choices[0].finish_reason == "stop"
    limited = client.chat.completions.create(model="tiny_chat", messages=USER, max_completion_tokens=2)
    assert limited.choices[0].message.content == "hello there"
    assert limited.choices[0].finish_reason == "length"
    several = client.chat.completions.create(model="tiny_chat", messages=USER, n=3, temperature=0.2)
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert {c.message.content for c in several.choices} == {"hello there world"}


def test_chat_logprobs_where_the_model_gives_them(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    completion = client.chat.completions.create(model="tiny_chat", messages=USER, logprobs=True)
    content = completion.choices[0].logprobs.content
    assert [entry.token for entry in content] == ["hello", " there", " world"]
    assert [round(entry.logprob, 2) for entry in content] == [-0.01, -0.02, -0.03]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="whole_text", messages=USER, logprobs=True)
    assert refused.value.body["param"] == "logprobs"  # type: ignore[index]


def test_chat_tool_calls(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    completion = client.chat.completions.create(model="tiny_chat", messages=USER, tools=tools)  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.type == "function" and call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"text": "hello there world"}
    streamed = list(
        client.chat.completions.create(model="tiny_chat", messages=USER, tools=tools, stream=True)
    )  # type: ignore[arg-type]
    calls = [call for c in streamed for call in (c.choices[0].delta.tool_calls or [])]
    assert [(call.index, call.function.name) for call in calls] == [(0, "lookup")]
    answered = client.chat.completions.create(
        model="tiny_chat", messages=USER, tools=tools, tool_choice="none"
    )  # type: ignore[arg-type]
    assert answered.choices[0].message.content == "hello there world"


def test_chat_of_a_model_that_is_not_decoupled(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    completion = client.chat.completions.create(model="whole_text", messages=messages, temperature=0.5)  # type: ignore[arg-type]
    # the config parameter's template made the prompt; the model's own token counts are the usage
    assert completion.choices[0].message.content == "<SYSTEM>S<USER>HI|0 t=0.5"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        len("<system>s<user>hi|0"),
        7,
    )
    chunks = list(client.chat.completions.create(model="whole_text", messages=messages, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "<SYSTEM>S<USER>HI|0"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="whole_text", messages=messages, top_p=0.5)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "top_p"  # type: ignore[index]


def test_completions(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    completion = client.completions.create(model="tiny_chat", prompt="one two")
    assert completion.choices[0].text == "one two" and completion.choices[0].finish_reason == "stop"
    echoed = client.completions.create(model="tiny_chat", prompt=["a b", "c"], echo=True, n=2, max_tokens=3)
    assert [c.text for c in echoed.choices] == ["a ba b a", "a ba b a", "cc c c", "cc c c"]
    stream = client.completions.create(model="tiny_chat", prompt="x y z", stream=True, logprobs=1)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == "x y z"
    assert chunks[0].choices[0].logprobs.token_logprobs == [pytest.approx(-0.01)]  # type: ignore[union-attr]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_embeddings(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    # the client asks for base64 unless told otherwise, and decodes it
    answer = client.embeddings.create(model="tiny_embed", input=["hello world", "hello cat", "zzz"])
    vectors = [np.asarray(item.embedding) for item in answer.data]
    assert [item.index for item in answer.data] == [0, 1, 2]
    assert all(v.shape == (64,) for v in vectors)
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    assert 0.2 < float(vectors[0] @ vectors[1]) < 0.99  # sharing "hello"
    assert not vectors[2].any()  # no word it knows
    floats = client.embeddings.create(model="tiny_embed", input="hello world", encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0])
    assert answer.usage.prompt_tokens == 5
    tokens = client.embeddings.create(
        model="token_embed", input=[[1, 2, 3], [5]], dimensions=3, encoding_format="float"
    )
    assert [item.embedding for item in tokens.data] == [[6.0, 3.0, 2.0], [5.0, 1.0, 2.0]]
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="tiny_embed", input="x", dimensions=3)
    assert refused.value.body["param"] == "dimensions"  # type: ignore[index]


def test_errors_as_the_client_raises_them(openai_server: RunningServer) -> None:
    client = _client(openai_server)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no_such_model", messages=USER)
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="tiny_chat", messages=USER, temperature=3.5)
    assert bad.value.body["param"] == "temperature"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as wrong_route:
        client.embeddings.create(model="tiny_chat", input="x")
    assert wrong_route.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.InternalServerError):
        client.completions.create(model="broken", prompt="")
    with pytest.raises(openai.APIError, match="the model failed"):
        list(client.completions.create(model="broken", prompt="go", stream=True))


def test_async_client(openai_server: RunningServer) -> None:
    async def main() -> tuple[str, list[str], int]:
        client = _async_client(openai_server)
        try:
            whole = await client.chat.completions.create(model="tiny_chat", messages=USER)
            stream = await client.chat.completions.create(model="tiny_chat", messages=USER, stream=True)
            pieces = [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]
            embedded = await client.embeddings.create(model="tiny_embed", input="hello")
            return whole.choices[0].message.content or "", pieces, len(embedded.data[0].embedding)
        finally:
            await client.close()

    content, pieces, dimensions = asyncio.run(main())
    assert content == "hello there world"
    assert pieces == ["hello", " there", " world"]
    assert dimensions == 64


def test_base64_is_little_endian_float32(openai_server: RunningServer) -> None:
    request = urllib.request.Request(
        f"http://{openai_server.url}/v1/embeddings",
        json.dumps({"model": "token_embed", "input": [4, 5], "encoding_format": "base64"}).encode(),
    )
    with urllib.request.urlopen(request) as response:
        encoded = json.load(response)["data"][0]["embedding"]
    assert np.frombuffer(base64.b64decode(encoded), "<f4").tolist() == [9.0, 2.0, 2.0, 3.0]


def test_the_example_client(openai_server: RunningServer) -> None:
    import subprocess
    import sys

    from tests.frontends.openai.conftest import EXAMPLE

    run = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "client.py"),
            "--url",
            f"http://{openai_server.url}/v1",
            "--text",
            "red car",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = run.stdout.splitlines()
    assert lines[0].startswith("models: ") and "tiny_chat" in lines[0] and "tiny_embed" in lines[0]
    assert lines[1] == "chat (streamed): " + " ".join(["red car"] * 6)
    assert lines[2] == "completion: 'red carred car red' finish: length"
    unrelated, related = (float(line.rsplit(" ", 1)[1]) for line in lines[3:5])
    # 'the red car on the road' shares its two known words, 'hello world' none
    assert related > 0.3 and abs(unrelated) < 0.1
