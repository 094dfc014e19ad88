"""How a decoupled model's responses to one request reach the engine, and its cancellation the model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nereid.backends.base import Outputs
from nereid.errors import NereidError

# One response: outputs, an error, or None (the final flag alone); and whether it is the last.
StreamItem = tuple[Outputs | NereidError | None, bool]

# Where a backend's response statistics go: (index, outcome, start, output start or None, end), in
# perf_counter nanoseconds (nereid.statistics.ModelStatistics.record_response)
ResponseRecorder = Callable[[int, str, int, int | None, int], None]


class ResponseStream:
    """Filled by the instance, read by the engine; both on the event loop."""

    def __init__(self, recorder: ResponseRecorder | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self._recorder = recorder
        self._reported = 0  # responses the backend reported statistics of
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._on_cancel: list[Callable[[], None]] = []
        self.finished = False  # the final response was put
        self.cancelled = False

    def put(self, result: Outputs | NereidError | None, final: bool) -> None:
        if self.finished:
            return
        self.finished = final
        self._queue.put_nowait((result, final))

    def record_response(self, outcome: str, start_ns: int, output_start_ns: int | None = None) -> None:
        """From the backend, on any thread, for each response it computed (or gave up), in order: its
        statistics, ending now. Backends that report none leave the model's response statistics empty,
        as Triton's Python backend does."""
        if self._recorder is not None:
            self._recorder(self._reported, outcome, start_ns, output_start_ns, time.perf_counter_ns())
        self._reported += 1

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
