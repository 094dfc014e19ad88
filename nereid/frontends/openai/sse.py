"""Server-sent events as OpenAI streams them: each chunk a `data: <json>` event, the end `data: [DONE]`."""

from __future__ import annotations

from typing import Any

import orjson

CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")
# Proxies (nginx) buffer responses unless told not to, which would hold tokens back.
NO_BUFFERING = (b"x-accel-buffering", b"no")
DONE = b"data: [DONE]\n\n"


def event(document: Any) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


def raw_event(body: bytes) -> bytes:
    """An event whose JSON is already written (an error document)."""
    return b"data: " + body + b"\n\n"


def dumps(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
