"""Base64 in HTTP requests is read as Triton's decoder reads it: characters outside the alphabet, such as
the line breaks C++ clients put every 72 characters, are skipped."""

from __future__ import annotations

import base64
import json

import pytest

from nereid.errors import InvalidArgument
from nereid.frontends.http.repository import decode_load_request


def _wrapped(data: bytes) -> str:
    text = base64.b64encode(data).decode()
    return "\n".join(text[i : i + 72] for i in range(0, len(text), 72)) + "\n"


def test_uploaded_files_wrapped_in_lines() -> None:
    data = bytes(range(256)) * 3
    body = json.dumps({"parameters": {"config": "{}", "file:1/model.onnx": _wrapped(data)}}).encode()
    config, files = decode_load_request(body, "m")
    assert config == "{}" and files == {"file:1/model.onnx": data}


def test_an_upload_that_is_not_base64_is_refused() -> None:
    body = json.dumps({"parameters": {"file:1/model.onnx": "abcde"}}).encode()
    with pytest.raises(InvalidArgument, match="parameter 'file:1/model.onnx' is not valid base64"):
        decode_load_request(body, "m")
