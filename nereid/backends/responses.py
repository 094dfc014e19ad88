"""How a decoupled model's responses to one request reach the engine, and its cancellation the model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nereid.backends.base import Outputs
from nereid.errors import NereidError

# One response: outputs, an error, or None (the final flag alone); and whether it is the last.
StreamItem = tuple[Outputs | NereidError | None, bool]


class ResponseStream:
    """Filled by the instance, read by the engine; both on the event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._on_cancel: list[Callable[[], None]] = []
        self.finished = False  # the final response was put
        self.cancelled = False

    def put(self, result: Outputs | NereidError | None, final: bool) -> None:
        if self.finished:
            return
        self.finished = final
        self._queue.put_nowait((result, final))

    async def get(self) -> StreamItem:
        return await self._queue.get()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        self._on_cancel.append(callback)

    def cancel(self) -> None:
        """The client went away: tell the model (`is_cancelled`), which should end the stream soon."""
        if self.cancelled or self.finished:
            return
        self.cancelled = True
        for callback in self._on_cancel:
            callback()
