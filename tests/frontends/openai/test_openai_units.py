"""The OpenAI frontend's parts without a server: request fields, chat templates, the tensor convention."""

from __future__ import annotations

from pathlib import Path

import pytest

from nereid.core.engine_client import ModelMetadata, TensorMetadata
from nereid.frontends.openai.convention import TEXT_PARAMETERS, model_convention
from nereid.frontends.openai.errors import OpenAIError, openai_error
from nereid.frontends.openai.requests import chat_body, completion_request, embeddings_request
from nereid.frontends.openai.templates import DEFAULT_TEMPLATE, TEMPLATE_FILE, ChatTemplates, TemplateFailed


def _metadata(inputs: dict[str, str], outputs: dict[str, str], max_batch_size: int = 0) -> ModelMetadata:
    return ModelMetadata(
        "m",
        ("1",),
        "python",
        tuple(TensorMetadata(name, datatype, (1,)) for name, datatype in inputs.items()),
        tuple(TensorMetadata(name, datatype, (1,)) for name, datatype in outputs.items()),
        max_batch_size,
    )


def test_convention_defaults_and_overrides() -> None:
    text = model_convention(
        _metadata({"text_input": "BYTES"}, {"text_output": "BYTES", "logprobs": "FP32"}), {}, True
    )
    assert text.serves_text and not text.serves_embeddings
    assert text.logprobs_output == "logprobs" and text.finish_reason_output is None
    assert text.text_parameters == frozenset(TEXT_PARAMETERS)
    # a tensor of the wrong data type does not count
    wrong = model_convention(_metadata({"text_input": "FP32"}, {"text_output": "BYTES"}), {}, False)
    assert not wrong.serves_text
    config = {
        "parameters": {
            "openai_text_input": {"string_value": "q"},
            "openai_embedding_output": {"string_value": "v"},
            "openai_request_parameters": {"string_value": "dimensions, user"},
        }
    }
    embed = model_convention(_metadata({"q": "BYTES"}, {"v": "FP16"}, 8), config, False)
    assert embed.serves_embeddings and embed.batched and embed.text_input == "q"
    assert embed.embedding_parameters == frozenset({"dimensions", "user"})


def test_chat_body_fields() -> None:
    body = chat_body(
        b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, '
        b'{"type": "text", "text": "b"}]}], "stop": "x", "max_completion_tokens": 9, "logprobs": true, '
        b'"top_logprobs": 2, "response_format": {"type": "json_object"}, "tool_choice": "auto"}'
    )
    assert body.messages == [{"role": "user", "content": "ab"}]
    assert body.request.parameters == {
        "stop": '["x"]',
        "max_tokens": 9,
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": '{"type":"json_object"}',
        "tool_choice": "auto",
    }
    with pytest.raises(OpenAIError) as refused:
        chat_body(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}')
    assert refused.value.param == "top_logprobs"
    with pytest.raises(OpenAIError) as refused:
        chat_body(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]}')
    assert refused.value.param == "tools"
    with pytest.raises(OpenAIError) as refused:
        chat_body(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": true}')
    assert refused.value.param == "seed"


def test_completion_and_embeddings_fields() -> None:
    request = completion_request(b'{"model": "m", "prompt": ["a", "b"], "n": 2, "logprobs": 3, "echo": true}')
    assert request.prompts == ("a", "b") and request.n == 2 and request.echo and request.logprobs
    assert request.parameters == {"logprobs": True, "top_logprobs": 3}
    with pytest.raises(OpenAIError) as refused:
        completion_request(b'{"model": "m", "prompt": ["a", "b", "c"], "n": 50}')
    assert refused.value.param == "prompt"
    single = embeddings_request(b'{"model": "m", "input": [1, 2, 3]}')
    assert single.tokens == ((1, 2, 3),) and single.texts is None
    many = embeddings_request(b'{"model": "m", "input": [[1], [2, 3]], "dimensions": 2}')
    assert many.tokens == ((1,), (2, 3)) and many.parameters == {"dimensions": 2}
    with pytest.raises(OpenAIError) as refused:
        embeddings_request(b'{"model": "m", "input": [1, "a"]}')
    assert refused.value.param == "input"


def test_errors_keep_their_status_in_openai_shape() -> None:
    status, body = openai_error(ValueError("boom"), "a test")
    assert status == 500 and b'"type":"server_error"' in body
    status, body = openai_error(OpenAIError(400, "bad", "x", "c"), "a test")
    assert (
        status == 400
        and body == b'{"error":{"message":"bad","type":"invalid_request_error","param":"x","code":"c"}}'
    )


def test_templates_default_file_and_parameter(tmp_path: Path) -> None:
    (tmp_path / "filed").mkdir()
    (tmp_path / "filed" / TEMPLATE_FILE).write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    templates = ChatTemplates([tmp_path])
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert templates.render("plain", object(), None, messages, None) == "system: s\nuser: u\nassistant:"
    assert templates.render("filed", object(), None, messages, None) == "[s][u]"
    declared = "{{ messages | length }} {{ tools | length }}"
    assert templates.render("declared", object(), declared, messages, [{"type": "function"}]) == "2 1"
    assert DEFAULT_TEMPLATE  # documented in docs/openai.md


def test_templates_run_sandboxed() -> None:
    templates = ChatTemplates([])
    messages = [{"role": "user", "content": "x"}]
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(TemplateFailed):
        templates.render("escaping", object(), escape, messages, None)
    with pytest.raises(TemplateFailed, match="refused the messages: no system"):
        templates.render("refusing", object(), "{{ raise_exception('no system') }}", messages, None)
    with pytest.raises(TemplateFailed, match="does not compile"):
        templates.render("broken", object(), "{% for %}", messages, None)
    mutate = "{% set _ = messages.append(1) %}{{ messages | length }}"
    with pytest.raises(TemplateFailed):
        templates.render("mutating", object(), mutate, messages, None)
