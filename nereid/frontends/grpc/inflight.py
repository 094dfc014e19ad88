"""Inference calls in flight on the gRPC endpoint, and what a stopping server says about them.

At SIGINT or SIGTERM the endpoint takes no new call and lets the running ones finish within
--exit-timeout-secs. Meanwhile the server says once a second how many are left, in the line Triton
prints (operators and tools watch for it).
"""

from __future__ import annotations

import asyncio

from nereid.exit_countdown import ExitCountdown


class InferCalls:
    """ModelInfer and ModelStreamInfer calls begun and not yet finished (a stream counts once).
    Touched on the event loop only."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = 0


async def report_while_draining(calls: InferCalls, countdown: ExitCountdown, period_s: float = 1.0) -> None:
    """Log the calls left every `period_s` until none is left or the countdown is over; the caller
    cancels it once the endpoint has stopped."""
    while countdown.left > 0 and calls.active > 0:
        countdown.report(f"Found {calls.active} gRPC service connections and inference handlers")
        await asyncio.sleep(period_s)
