"""The server-wide bound on model instances, checked before a version starts any.

A config may ask for any number of instances (`instance_group [{ count: 1000000 }]`, through the load API
with a config override too), and each Python-backend instance is a process of its own: without a bound,
one load request can fill the host's memory with workers and stop every model from serving. Here a load
asks for all of its version's instances at once, before any starts; one that would exceed the bound fails
with the bound's flag in its text, and the versions already serving go on serving.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from nereid.errors import InvalidArgument
from nereid.host import available_cpus

# Instances per CPU, and host memory per instance, that the default allows. Triton's repositories hold
# hundreds of instances on small hosts (a CPU model whose config names no count gets two instances:
# its QA suite's L0_infer repository asks for about 290), so the bound sits well above what real
# repositories ask for. It is set by memory: a Python worker process takes 20 to 40 MiB before its model
# loads anything, so at 48 MiB an instance the bound comes before workers alone fill the host's memory.
INSTANCES_PER_CPU = 256
MEMORY_PER_INSTANCE = 48 << 20
MIN_INSTANCES = 16


def host_memory_bytes() -> int | None:
    """The host's physical memory, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_max_instances(cpus: int | None = None, memory_bytes: int | None = None) -> int:
    """INSTANCES_PER_CPU for each CPU this process may use, but no more than the host's memory holds at
    MEMORY_PER_INSTANCE each; at least MIN_INSTANCES."""
    cpus = available_cpus() if cpus is None else cpus
    memory_bytes = host_memory_bytes() if memory_bytes is None else memory_bytes
    bound = cpus * INSTANCES_PER_CPU
    if memory_bytes:
        bound = min(bound, memory_bytes // MEMORY_PER_INSTANCE)
    return max(MIN_INSTANCES, bound)


class InstanceBudget:
    """Instances the server holds (serving versions, and those of loads under way), against a bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def reserve(self, count: int, label: str) -> Callable[[], None]:
        """Hold `count` instances for `label` (a model version), or raise before any starts; returns what
        gives them back, which does so once however often it is called."""
        with self._lock:
            if self._held + count > self.limit:
                raise InvalidArgument(
                    f"{label} asks for {count} instances, but the server holds {self._held} of at most "
                    f"{self.limit} (--max-model-instances); the load is refused and nothing was started"
                )
            self._held += count
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if not released:
                    released = True
                    self._held -= count

        return release
