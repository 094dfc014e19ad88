"""What every scheduler offers the engine: the seam between a request and a model's instances."""

from __future__ import annotations

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
