"""Drive the ASGI app in process, without sockets: fast tests of routing, codecs and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class AsgiResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def call(
    app: Any, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> AsgiResponse:
    sent_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body and "content-length" not in (headers or {}):
        sent_headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": sent_headers, "query_string": b""}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    await app(scope, receive, send)
    start = out[0]
    return AsgiResponse(
        status=start["status"],
        headers={k.decode(): v.decode() for k, v in start["headers"]},
        body=b"".join(m.get("body", b"") for m in out[1:]),
    )
