"""Bodies of the control extensions: repository index, load (config and base64 files) and unload;
shared memory registration."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from nereid.errors import InternalError, InvalidArgument
from nereid.frontends.http import json_body


def _request_object(body: bytes) -> dict[str, Any]:
    """The JSON object of a repository request; an empty body is an empty object."""
    if not body.strip():
        return {}
    try:
        document = json_body.loads(body)
    except orjson.JSONDecodeError as exc:  # Triton answers these 500
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("the request body must be a JSON object")
    return document


def _request_parameters(body: bytes) -> dict[str, Any]:
    parameters = _request_object(body).get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("attempt to get members for non-object: 'parameters' must be a JSON object")
    return parameters


def decode_index_request(body: bytes) -> bool:
    """`ready` of a repository index request."""
    ready = _request_object(body).get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidArgument("Invalid value for 'ready': expected a boolean")
    return ready


def decode_load_request(body: bytes, model_name: str) -> tuple[str | None, dict[str, bytes]]:
    """The `config` override and the `file:<path>` contents (base64 on the wire) of a load request."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in _request_parameters(body).items():
        if not isinstance(value, str):
            raise InvalidArgument(
                f"load of model '{model_name}': parameter '{key}' must be a string: attempt to access JSON "
                "non-string as string"
            )
        if key == "config":
            config = value
        elif key.startswith("file:"):
            try:
                files[key] = base64.b64decode(value)  # skipping line breaks, as Triton's decoder does
            except binascii.Error as exc:
                raise InvalidArgument(
                    f"load of model '{model_name}': parameter '{key}' is not valid base64: {exc}"
                ) from None
    return config, files


def decode_unload_request(body: bytes) -> bool:
    """`unload_dependents` of an unload request."""
    value = _request_parameters(body).get("unload_dependents", False)
    if not isinstance(value, bool):
        raise InvalidArgument(
            "Unable to parse 'unload_dependents': attempt to access JSON non-boolean as boolean"
        )
    return value


def _register_field(document: dict[str, Any], key: str, kind: type, kind_text: str) -> Any:
    if key not in document:
        raise InvalidArgument(f"Shared memory register request has no '{key}' field")
    value = document[key]
    negative = isinstance(value, int) and value < 0
    if type(value) is not kind or negative:
        raise InvalidArgument(
            f"Unable to parse '{key}': attempt to access JSON non-{kind_text} as {kind_text}"
        )
    return value


def decode_system_register(body: bytes) -> tuple[str, int, int]:
    """`key`, `offset` and `byte_size` of a system shared memory register request."""
    document = _request_object(body)
    key = _register_field(document, "key", str, "string")
    offset = _register_field(document, "offset", int, "unsigned-integer") if "offset" in document else 0
    size = _register_field(document, "byte_size", int, "unsigned-integer")
    return key, offset, size


def decode_cuda_register(body: bytes) -> tuple[str, int, int]:
    """`raw_handle` (base64 text), `device_id` and `byte_size` of a CUDA shared memory register request."""
    document = _request_object(body)
    handle = _register_field(document, "raw_handle", dict, "object")
    b64 = handle.get("b64")
    if not isinstance(b64, str):
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    device = _register_field(document, "device_id", int, "unsigned-integer")
    size = _register_field(document, "byte_size", int, "unsigned-integer")
    return b64, device, size
