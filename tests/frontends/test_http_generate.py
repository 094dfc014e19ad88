"""Generate bodies turned into infer requests, with Triton's texts for what it refuses: an input given
twice, a value of the wrong JSON type (checked in document order), a nested parameter."""

from __future__ import annotations

import pytest

from nereid.core.engine_client import ModelMetadata, TensorMetadata
from nereid.errors import NereidError
from nereid.frontends.http.generate import generate_request

LLM = ModelMetadata(
    "llm",
    ("1",),
    "python",
    (TensorMetadata("PROMPT", "BYTES", (1, 1)), TensorMetadata("STREAM", "BOOL", (1, 1))),
    (TensorMetadata("TEXT", "BYTES", (1, -1)),),
    0,
)


class _Engine:
    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        return LLM


def _request(body: str) -> None:
    generate_request(_Engine(), "llm", "", body.encode())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ('{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}', "input 'PROMPT' already exists in request"),
        ('{"PROMPT": "a", "STREAM": false, "STREAM": true, "PROMPT": "b"}', "input 'STREAM' already exists"),
        ('{"PROMPT": 123, "STREAM": false}', "attempt to access JSON non-string as string"),
        ('{"STREAM": 123, "PROMPT": true}', "attempt to access JSON non-boolean as boolean"),
        ('{"PROMPT": {"USER": "a"}, "STREAM": true}', "attempt to access JSON non-string as string"),
        (
            '{"PROMPT": "a", "STREAM": true, "parameters": {"nested": {"twice": 1}}}',
            "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
        ),
    ],
)
def test_refusals_in_tritons_words(body: str, text: str) -> None:
    with pytest.raises(NereidError) as raised:
        _request(body)
    assert text in raised.value.message


def test_a_well_formed_body_with_a_repeated_name_inside_a_value_is_taken() -> None:
    _request('{"PROMPT": "say \\"PROMPT\\" twice", "STREAM": false, "parameters": {"k": "PROMPT"}}')
