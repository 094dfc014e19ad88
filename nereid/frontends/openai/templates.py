"""Chat templates: a chat's `messages` made into the prompt a text model takes, with Jinja.

A model declares its template as the config parameter `chat_template` (the template's text) or as a file
`chat_template.jinja` in its folder (local repositories); without either, DEFAULT_TEMPLATE. Templates
are the ones model hubs ship (Hugging Face's `chat_template`): they see `messages` (each with `role` and
`content` as a string, plus `tool_calls`, `tool_call_id` and `name` where given), `tools`,
`add_generation_prompt` (true), `bos_token` and `eos_token` (empty), and `raise_exception(message)`.

Templates are code a model's author wrote: they run in Jinja's immutable sandbox, which refuses access to
Python internals and changes to the objects passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from nereid.errors import InvalidArgument

TEMPLATE_FILE = "chat_template.jinja"
# One line per message, its role first; the prompt ends where the assistant's answer should begin.
DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message.role }}: {{ message.content }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class TemplateFailed(InvalidArgument):
    """The model's template refused the messages (its `raise_exception`) or failed on them."""


def _raise_exception(message: str) -> None:
    raise TemplateFailed(f"the model's chat template refused the messages: {message}")


def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    environment.globals["raise_exception"] = _raise_exception
    return environment


class ChatTemplates:
    """Compiled templates by model; a model reloaded with another configuration gets its template again."""

    def __init__(self, repositories: Sequence[Path]) -> None:
        self._repositories = tuple(repositories)
        self._environment = _environment()
        self._compiled: dict[str, tuple[object, Any]] = {}  # model: (config it was read for, template)

    def render(
        self, model: str, config: object, declared: str | None, messages: list[dict[str, Any]], tools: Any
    ) -> str:
        template = self._template(model, config, declared)
        try:
            return str(
                template.render(
                    messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token=""
                )
            )
        except TemplateFailed:
            raise
        except TemplateError as exc:  # the sandbox's refusals included
            raise TemplateFailed(f"the chat template of model '{model}' failed: {exc}") from None

    def _template(self, model: str, config: object, declared: str | None) -> Any:
        cached = self._compiled.get(model)
        if cached is not None and cached[0] is config:
            return cached[1]
        source = declared if declared is not None else self._file(model)
        try:
            template = self._environment.from_string(source if source is not None else DEFAULT_TEMPLATE)
        except TemplateError as exc:
            raise TemplateFailed(f"the chat template of model '{model}' does not compile: {exc}") from None
        self._compiled[model] = (config, template)
        return template

    def _file(self, model: str) -> str | None:
        for repository in self._repositories:
            path = repository / model / TEMPLATE_FILE
            if path.is_file():
                return path.read_text(encoding="utf-8")
        return None
