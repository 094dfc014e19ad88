"""Inference calls in flight on the gRPC endpoint, and what a stopping server says about them.

At SIGINT or SIGTERM the endpoint takes no new call and lets the running ones finish within
--exit-timeout-secs. Meanwhile the server says once a second how many are left, in the line Triton
prints (operators and tools watch for it).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("nereid")


class InferCalls:
    """ModelInfer and ModelStreamInfer calls begun and not yet finished (a stream counts once).
    Touched on the event loop only."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = 0


async def report_while_draining(calls: InferCalls, timeout_s: int, period_s: float = 1.0) -> None:
    """Log the calls left every `period_s` until none is left or `timeout_s` periods have passed; the
    caller cancels it once the endpoint has stopped."""
    remaining = timeout_s
    while remaining > 0 and calls.active > 0:
        log.info(
            "Timeout %d: Found %d gRPC service connections and inference handlers", remaining, calls.active
        )
        await asyncio.sleep(period_s)
        remaining -= 1
