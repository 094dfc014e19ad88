"""Read config.pbtxt into Triton's own ModelConfig protobuf (shipped with tritonclient)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import ModelConfigError


@dataclass(frozen=True)
class ConfigSource:
    """Where a config came from, so errors can name the file and the line."""

    path: Path | None  # None when the model has no config file (fully auto-completed, or sent by API)
    text: str = ""
    label: str = "<auto-completed config>"  # what to call it when there is no file

    def where(self, needle: str | None = None) -> str:
        """`file:line` of the first line containing `needle`, or just the file."""
        name = str(self.path) if self.path else self.label
        if needle and self.text:
            for number, line in enumerate(self.text.splitlines(), start=1):
                if needle in line:
                    return f"{name}:{number}"
        return name


def parse_config_text(text: str, source: ConfigSource) -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ModelConfigError(f"{_with_position(source, exc)}") from None
    return config


def read_config(model_dir: Path, config_name: str = "") -> tuple[mc.ModelConfig, ConfigSource]:
    """`configs/<config_name>.pbtxt` when asked for and present, else `config.pbtxt`, else empty."""
    candidates = []
    if config_name:
        candidates.append(model_dir / "configs" / f"{config_name}.pbtxt")
    candidates.append(model_dir / "config.pbtxt")
    for path in candidates:
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ModelConfigError(f"{path}: cannot read model configuration: {exc}") from None
            source = ConfigSource(path, text)
            return parse_config_text(text, source), source
    return mc.ModelConfig(), ConfigSource(None)


_POSITION = re.compile(r"^(\d+):(\d+) : (.*)$", re.DOTALL)


def _with_position(source: ConfigSource, exc: text_format.ParseError) -> str:
    """protobuf says '12:5 : Message type ... has no field named "dim"'; we say file:12:5: ..."""
    name = str(source.path) if source.path else "<config>"
    match = _POSITION.match(str(exc))
    if not match:
        return f"{name}: failed to parse model configuration: {exc}"
    line, column, message = match.groups()
    message = _triton_wording(message)
    hint = _hint(message) or _unclosed(source.text)
    return f"{name}:{line}:{column}: {message}{hint}"


_CLOSERS = {"{": "}", "[": "]"}


def _unclosed(text: str) -> str:
    """Where the parser trips over a bracket, the mistake is often an earlier one left open: name the first
    bracket that is not closed by its partner (outside strings and comments)."""
    opened: list[tuple[str, int]] = []
    quote = ""
    for number, line in enumerate(text.splitlines(), start=1):
        escaped = False
        for char in line:
            if quote:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == quote:
                    quote = ""
            elif char in "\"'":
                quote = char
            elif char == "#":
                break
            elif char in _CLOSERS:
                opened.append((char, number))
            elif char in "}]":
                if not opened or _CLOSERS[opened[-1][0]] != char:
                    if opened:
                        bracket, where = opened[-1]
                        return f" (the '{bracket}' opened on line {where} is not closed before this '{char}')"
                    return f" (this '{char}' on line {number} closes nothing)"
                opened.pop()
        quote = ""  # a string does not span lines
    if opened:
        bracket, where = opened[-1]
        return f" (the '{bracket}' opened on line {where} is never closed)"
    return ""


# Python's protobuf words some integer errors differently from the C++ parser Triton uses; tools that check
# Triton's log look for its words.
_INTEGER_WORDING = (
    (re.compile(r"Couldn't parse integer: (.*)$"), r"Expected integer, got: \1"),
    (re.compile(r"Value out of range: -\d+$"), "Expected integer, got: -"),
    (re.compile(r"Value out of range: (\d+)$"), r"Integer out of range (\1)"),
)


def _triton_wording(message: str) -> str:
    for pattern, replacement in _INTEGER_WORDING:
        message = pattern.sub(replacement, message)
    return message


def _hint(message: str) -> str:
    """A suggestion for the most common mistake: a misspelt field name."""
    match = re.search(r'Message type "([\w.]+)" has no field named "(\w+)"', message)
    if not match:
        return ""
    try:
        descriptor = mc.DESCRIPTOR.pool.FindMessageTypeByName(match.group(1))
    except KeyError:
        return ""
    close = difflib.get_close_matches(match.group(2), [f.name for f in descriptor.fields], n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""
