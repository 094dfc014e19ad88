"""Trace setting updates as the trace extension's HTTP body and gRPC message carry them, checked with
Triton's rules and texts (a number is parsed as C++'s std::stoi does: leading blanks and a sign, digits,
anything after them ignored; rate and log frequency wrap into 32 unsigned bits as in Triton)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from nereid.errors import InternalError, InvalidArgument, Unsupported
from nereid.tracing.config import LEVEL_OFF, LEVEL_TENSORS, LEVEL_TIMESTAMPS
from nereid.tracing.settings import SettingUpdate

_NUMBER = re.compile(r"\s*([+-]?\d+)")
_INT32 = (-(2**31), 2**31 - 1)
_FIELDS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}


def http_update(body: bytes) -> SettingUpdate:
    """The update a POST body asks for (a JSON object; JSON null clears a setting)."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(request, dict):
        return SettingUpdate()  # Triton looks its settings up in an object only, and finds none
    _refuse_file(request)
    values: dict[str, Any] = {}
    if "trace_level" in request:
        levels = request["trace_level"]
        if levels is not None:
            if not isinstance(levels, list):
                raise InternalError("attempt to access JSON non-array as array")
            if not all(isinstance(v, str) for v in levels):
                raise InternalError("attempt to access JSON non-string as string")
            level = _level(levels)
            if level is not None:
                values["level"] = level
    for key in ("trace_rate", "trace_count", "log_frequency"):
        if key in request and request[key] is not None:
            if not isinstance(request[key], str):
                raise InternalError("attempt to access JSON non-string as string")
            values[_FIELDS[key]] = _number(key, request[key], http=True)
    return SettingUpdate(
        **values, cleared=frozenset(_FIELDS[k] for k in _FIELDS if k in request and request[k] is None)
    )


def grpc_update(settings: Mapping[str, Sequence[str]]) -> SettingUpdate | None:
    """The update a TraceSettingRequest asks for (no value clears a setting); None when it has no
    settings at all (a read)."""
    if not settings:
        return None
    _refuse_file(settings)
    values: dict[str, Any] = {}
    if settings.get("trace_level"):
        level = _level(settings["trace_level"])
        if level is not None:
            values["level"] = level
    for key in ("trace_rate", "trace_count", "log_frequency"):
        given = settings.get(key)
        if given:
            if len(given) > 1:
                raise InvalidArgument(f"expect only 1 value for '{key}'")
            values[_FIELDS[key]] = _number(key, given[0], http=False)
    cleared = frozenset(_FIELDS[k] for k in _FIELDS if k in settings and not settings[k])
    return SettingUpdate(**values, cleared=cleared)


def _refuse_file(settings: Mapping[str, Any]) -> None:
    if "trace_file" in settings:
        raise Unsupported("trace file location can not be updated through network protocol")


def _level(levels: Sequence[str]) -> int | None:
    """The level bits of a list of level names; unknown names are ignored, as in Triton (None: none)."""
    level: int | None = None
    for name in levels:
        if name == "OFF":
            if len(levels) != 1:
                raise InvalidArgument("Expect only one trace level 'OFF' is specified")
            level = LEVEL_OFF
        elif name == "TIMESTAMPS":
            level = (level or 0) | LEVEL_TIMESTAMPS
        elif name == "TENSORS":
            level = (level or 0) | LEVEL_TENSORS
    return level


def _number(key: str, text: str, http: bool) -> int:
    match = _NUMBER.match(text)
    if match is None:
        raise InvalidArgument(f"Unable to parse '{key}', got: {text}")
    value = int(match.group(1))
    if key == "trace_count":
        if not _INT32[0] <= value <= _INT32[1]:
            raise InvalidArgument(
                f"Unable to parse '{key}', value is out of range [ -1, {_INT32[1]} ], got: {text}"
            )
        if value < -1:
            separator = "" if http else " "  # Triton's HTTP text has no space there, its gRPC text has
            raise InvalidArgument(f"Unable to parse '{key}'. Expecting value >= -1, got:{separator}{text}")
        return value
    if not _INT32[0] <= value <= _INT32[1]:
        raise InvalidArgument(
            f"Unable to parse '{key}', value is out of range [ 0, 4294967295 ], got: {text}"
        )
    return value % 2**32  # a negative value wraps, as Triton's assignment to uint32 does
