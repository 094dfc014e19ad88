"""The tensor convention by which any model serves the OpenAI routes.

A text model (chat and completions) takes its prompt in a BYTES input `text_input` and answers with a
BYTES output `text_output`: the whole text in one response, or a piece per response when it is decoupled
(it streams). An embeddings model takes a BYTES `text_input` (or INT64 token ids in `input_ids`) and
answers an FP32 `embedding`. Optional outputs, read where the model has them: `finish_reason` (BYTES),
`prompt_tokens` and `completion_tokens` (integers), `logprobs` (FP32, one per token of the piece),
`tool_calls` (BYTES: a JSON list of calls). The sampling fields of a request reach the model as request
parameters of the same names.

Every name can be changed per model with a `config.pbtxt` parameter `openai_<role>` (for example
`openai_text_input`), and `openai_request_parameters` lists the fields the model accepts (a field outside
it is refused with 400). docs/openai.md is the user's guide to this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nereid.core.engine_client import ModelMetadata

# The request fields a text model receives as request parameters unless its config narrows the list.
TEXT_PARAMETERS = (
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "response_format",
)
# `dimensions` is not among them: an embeddings model that honours it says so by listing it.
EMBEDDING_PARAMETERS = ("user",)
_DEFAULT_NAMES = {
    "text_input": "text_input",
    "text_output": "text_output",
    "token_input": "input_ids",
    "embedding_output": "embedding",
    "finish_reason_output": "finish_reason",
    "prompt_tokens_output": "prompt_tokens",
    "completion_tokens_output": "completion_tokens",
    "logprobs_output": "logprobs",
    "tool_calls_output": "tool_calls",
}
_INTEGERS = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
_FLOATS = ("FP16", "BF16", "FP32", "FP64")


@dataclass(frozen=True, slots=True)
class ModelConvention:
    """How one loaded model version serves the OpenAI routes: its tensors by role (None where it lacks
    one), and what it accepts."""

    name: str
    decoupled: bool
    batched: bool  # max_batch_size > 0: inputs carry a batch dimension of one
    text_input: str | None
    token_input: str | None
    text_output: str | None
    embedding_output: str | None
    finish_reason_output: str | None
    prompt_tokens_output: str | None
    completion_tokens_output: str | None
    logprobs_output: str | None
    tool_calls_output: str | None
    text_parameters: frozenset[str]
    embedding_parameters: frozenset[str]
    chat_template: str | None  # the config parameter's template text; None: a file or the default

    @property
    def serves_text(self) -> bool:
        """Chat and completions."""
        return self.text_input is not None and self.text_output is not None

    @property
    def serves_embeddings(self) -> bool:
        return self.embedding_output is not None and (
            self.text_input is not None or self.token_input is not None
        )

    def routes_reason(self, route: str) -> str:
        """Why this model cannot serve `route`, in terms of the convention."""
        if route == "embeddings":
            return (
                f"it has no FP32 output '{self.embedding_output or _DEFAULT_NAMES['embedding_output']}' "
                "and a BYTES input for text or INT64 input for token ids (config parameters "
                "openai_embedding_output, openai_text_input, openai_token_input)"
            )
        return (
            "it needs a BYTES input and a BYTES output for text (config parameters openai_text_input, "
            "openai_text_output; by default 'text_input' and 'text_output')"
        )


def model_convention(metadata: ModelMetadata, config: dict[str, Any], decoupled: bool) -> ModelConvention:
    """The convention of a model from its metadata and its completed configuration (Triton's JSON form)."""
    parameters = {
        key: value.get("string_value", "")
        for key, value in (config.get("parameters") or {}).items()
        if isinstance(value, dict)
    }
    inputs = {t.name: t.datatype for t in metadata.inputs}
    outputs = {t.name: t.datatype for t in metadata.outputs}

    def name(role: str, tensors: dict[str, str], datatypes: tuple[str, ...]) -> str | None:
        chosen = parameters.get(f"openai_{role}") or _DEFAULT_NAMES[role]
        return chosen if tensors.get(chosen) in datatypes else None

    return ModelConvention(
        name=metadata.name,
        decoupled=decoupled,
        batched=metadata.max_batch_size > 0,
        text_input=name("text_input", inputs, ("BYTES",)),
        token_input=name("token_input", inputs, ("INT64", "INT32")),
        text_output=name("text_output", outputs, ("BYTES",)),
        embedding_output=name("embedding_output", outputs, _FLOATS),
        finish_reason_output=name("finish_reason_output", outputs, ("BYTES",)),
        prompt_tokens_output=name("prompt_tokens_output", outputs, _INTEGERS),
        completion_tokens_output=name("completion_tokens_output", outputs, _INTEGERS),
        logprobs_output=name("logprobs_output", outputs, _FLOATS),
        tool_calls_output=name("tool_calls_output", outputs, ("BYTES",)),
        text_parameters=_listed(parameters.get("openai_request_parameters"), TEXT_PARAMETERS),
        embedding_parameters=_listed(parameters.get("openai_request_parameters"), EMBEDDING_PARAMETERS),
        chat_template=parameters.get("chat_template") or None,
    )


def _listed(text: str | None, default: tuple[str, ...]) -> frozenset[str]:
    if text is None:
        return frozenset(default)
    return frozenset(item.strip() for item in text.split(",") if item.strip())
