"""Triton's rate limiter (`--rate-limit=execution_count`): an instance runs only while the resources its
instance group names are free, across every loaded model.

Resources are per device unless a model config marks them `global`. How many copies exist: what
`--rate-limit-resource=<name>:<count>[:<device>]` says, else the most any registered instance needs.
When resources free up, the instance pools waiting for them are woken in stride order: each execution
adds the instance's `priority` to its pass, and the instance whose pass would be lowest once its next
execution is counted goes first (weighted fair queueing's finish order; at a tie, the higher priority,
i.e. the lower number). So an instance of priority 2 gets half the turns of one of priority 1 when both
wait (Triton's rule), and the priority 1 instance takes the first two of every three turns, as in Triton.

Acquire and release happen on event loops (and on a warmup's loop while a model loads), so every change
takes the lock; each is a few dictionary operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument
from nereid.settings import ResourceLimit


@dataclass(eq=False)
class Claim:
    """What one instance needs to run: (resource, global, count) triples, on its device, at its priority."""

    label: str
    resources: tuple[tuple[str, bool, int], ...]
    device: int
    priority: int = 1
    passes: int = 0  # stride scheduling: grows by `priority` with each execution

    def turn(self) -> tuple[int, int]:
        """Its place in the queue for resources, the lowest first: its pass after its next execution."""
        return (self.passes + self.priority, self.priority)

    @classmethod
    def for_group(cls, label: str, group: mc.ModelInstanceGroup, device: int) -> Claim:
        limiter = group.rate_limiter
        resources = tuple((r.name, getattr(r, "global"), r.count) for r in limiter.resources)
        return cls(label, resources, device, max(1, limiter.priority))


@dataclass(eq=False)
class _Waiter:
    wake: Callable[[], None]
    loop: asyncio.AbstractEventLoop
    claims: list[Claim] = field(default_factory=list)
    scheduled: bool = False  # a wake-up is on its way


class RateLimiter:
    def __init__(self, limits: Sequence[ResourceLimit] = ()) -> None:
        self._limits = tuple(limits)
        self._claims: list[Claim] = []
        self._allocated: dict[tuple[str, int | None], int] = {}  # (resource, device or None if global)
        self._waiters: dict[int, _Waiter] = {}  # by id of the wake callback's owner
        self._lock = threading.Lock()

    # registration, at load and unload
    def register(self, claims: Sequence[Claim]) -> None:
        """Add a model version's instances; refuse (InvalidArgument, Triton's texts) a resource that is
        both global and per device, or whose explicit count is below what an instance needs."""
        with self._lock:
            everyone = self._claims + list(claims)
            kinds: dict[str, bool] = {}
            for claim in everyone:
                for name, is_global, _ in claim.resources:
                    if kinds.setdefault(name, is_global) != is_global:
                        raise InvalidArgument(
                            f'Resource "{name}" is present as both global and device-specific resource in the '
                            "model configuration."
                        )
            for claim in claims:
                for name, is_global, count in claim.resources:
                    available = self._total(everyone, name, None if is_global else claim.device)
                    if available < count:
                        raise InvalidArgument(
                            f'Resource count for "{name}" is limited to {available} which will prevent '
                            f"scheduling of one or more model instances, the minimum required count is {count}"
                        )
            self._claims = everyone

    def unregister(self, claims: Sequence[Claim]) -> None:
        with self._lock:
            gone = set(map(id, claims))
            self._claims = [c for c in self._claims if id(c) not in gone]

    def _total(self, claims: Sequence[Claim], name: str, device: int | None) -> int:
        """Copies of a resource: the explicit count for the device, else for every device, else (no
        explicit count at all) the most any instance needs."""
        explicit = [limit for limit in self._limits if limit.name == name]
        if explicit:
            for limit in explicit:
                if device is not None and limit.device == device:
                    return limit.count
            for limit in explicit:
                if limit.device is None:
                    return limit.count
            return 0  # counts given for other devices only
        needs = [
            count
            for claim in claims
            for resource, is_global, count in claim.resources
            if resource == name and (is_global or claim.device == device)
        ]
        return max(needs, default=0)

    # executions
    def can_run(self, claim: Claim) -> bool:
        """Its resources are free, and no instance that competes for them waits with a lower pass."""
        with self._lock:
            return self._free(claim) and not self._ahead(claim)

    def _free(self, claim: Claim) -> bool:
        for name, is_global, count in claim.resources:
            key = (name, None if is_global else claim.device)
            total = self._total(self._claims, *key)
            if self._allocated.get(key, 0) + count > total:
                return False
        return True

    def _ahead(self, claim: Claim) -> bool:
        names = {name for name, _, _ in claim.resources}
        return any(
            other is not claim
            and other.turn() < claim.turn()
            and any(name in names for name, _, _ in other.resources)
            for waiter in self._waiters.values()
            for other in waiter.claims
        )

    def acquire(self, claim: Claim) -> bool:
        """Take the claim's resources if they are free (True), else take nothing (False)."""
        with self._lock:
            if not self._free(claim):
                return False
            for name, is_global, count in claim.resources:
                key = (name, None if is_global else claim.device)
                self._allocated[key] = self._allocated.get(key, 0) + count
            claim.passes += claim.priority
            return True

    def release(self, claim: Claim) -> None:
        """Give the resources back and wake whoever waits for them, lowest pass first. A waiter stays
        registered until its wake-up has run, so that nobody behind it takes the resources meanwhile."""
        with self._lock:
            for name, is_global, count in claim.resources:
                key = (name, None if is_global else claim.device)
                self._allocated[key] -= count
            due = [(owner, w) for owner, w in self._waiters.items() if not w.scheduled]
            due.sort(key=lambda item: min(c.turn() for c in item[1].claims))
            for _, waiter in due:
                waiter.scheduled = True
        for owner, waiter in due:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits there any more
                waiter.loop.call_soon_threadsafe(self._wake, owner, waiter)

    def _wake(self, key: int, waiter: _Waiter) -> None:
        with self._lock:
            if self._waiters.get(key) is waiter:
                del self._waiters[key]
        waiter.wake()  # may wait again, as a new waiter

    def wait(self, owner: object, claim: Claim, wake: Callable[[], None]) -> None:
        """Call `wake` (on the current loop) once resources are released: `owner` had an idle instance
        that `claim` kept from running."""
        with self._lock:
            waiter = self._waiters.get(id(owner))
            if waiter is None:
                waiter = self._waiters[id(owner)] = _Waiter(wake, asyncio.get_running_loop())
            if claim not in waiter.claims:
                waiter.claims.append(claim)
