"""The --exit-timeout-secs countdown of a stopping server, as its log tells it.

From the signal on, each stage of the stop says once a second what it still waits for: open HTTP
connections, then gRPC calls, then models' requests in flight. Each line reads "Timeout N: ...", N being
the seconds left, in the words Triton uses (operators and tools watch for them). The stages share one
countdown, so N goes down from one line to the next whichever stage prints it, and never starts over.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("nereid")


class ExitCountdown:
    """The seconds left of --exit-timeout-secs, from the moment it is created (the signal)."""

    def __init__(self, seconds: int) -> None:
        self._seconds = seconds
        self._start = time.monotonic()
        self.deadline = self._start + seconds
        self._next = seconds  # at most what the next line may name: each line names a smaller number

    @property
    def left(self) -> int:
        """The number the next line names: the whole seconds left, and less than any line before."""
        elapsed = int(time.monotonic() - self._start)
        return max(0, min(self._next, self._seconds - elapsed))

    def report(self, waiting_for: str) -> None:
        number = self.left
        log.info("Timeout %d: %s", number, waiting_for)
        self._next = number - 1
