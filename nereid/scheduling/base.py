"""What every scheduler offers the engine: the seam between a request and a model's instances."""

from __future__ import annotations

import os
from typing import Protocol

from nereid.backends.base import BackendRequest, Outputs
from nereid.statistics import RequestTiming


class Scheduler(Protocol):
    async def execute(self, request: BackendRequest, timing: RequestTiming | None = None) -> Outputs:
        """The request's outputs; `timing`, when given, receives its queue and execution times."""
        ...

    def pending(self) -> int:
        """Requests waiting for an instance (the pending-request gauge)."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why the model cannot serve now, or None."""
        ...

    async def model_ready(self) -> bool:
        """The model's own readiness check, where it has one."""
        ...

    def stop(self) -> None:
        """Answer or fail what is queued, then release the instances."""
        ...

    def refuse_new_sequences(self) -> None:
        """The server is stopping: refuse what would start a sequence; the ones started go on."""
        ...

    def waiting_sequences(self) -> int:
        """Sequences started, neither ended nor released, with no request in flight: a stopping server
        waits for them as for requests."""
        ...


# Triton's testing hooks: a batcher starts deciding only once this many requests are queued (a latch:
# once reached, it never holds again). The backlog count adds a condition for the sequence batcher:
# that many requests also wait in its backlog.
DELAY_SCHEDULER_ENV = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_SCHEDULER_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


def delay_count(variable: str) -> int:
    """A hook's count; unset, not a number or negative: 0 (no delay)."""
    try:
        return max(0, int(os.environ.get(variable, "0")))
    except ValueError:
        return 0
