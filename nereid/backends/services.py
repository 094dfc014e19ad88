"""What the server offers model code that calls back into it (BLS, model control): the engine, by protocol.

Backends are loaded once per process, before any engine exists, so the engine registers itself here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Protocol

from nereid.errors import Unavailable
from nereid.types import InferRequest

if TYPE_CHECKING:
    from nereid.streaming import StreamEvent


class ServerServices(Protocol):
    def infer_stream(self, request: InferRequest) -> AsyncGenerator[StreamEvent, None]: ...

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str) -> None: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...


_services: ServerServices | None = None


def provide(services: ServerServices) -> None:
    global _services
    _services = services


def current() -> ServerServices:
    if _services is None:
        raise Unavailable("no inference server runs in this process to answer calls from model code")
    return _services
