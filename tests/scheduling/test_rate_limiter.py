"""The rate limiter with gated fake instances: resources shared across models, priorities, batching while
blocked, and Triton's load-time texts."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, BackendResult
from nereid.errors import InvalidArgument
from nereid.repository import ModelManager
from nereid.scheduling.batch_policy import BatchPolicy
from nereid.scheduling.default import DefaultScheduler
from nereid.scheduling.dynamic import BatcherConfig, DynamicBatcher
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.settings import ResourceLimit, ServerSettings
from tests.conftest import EXAMPLES


class GatedInstance:
    """Each execution waits for the gate (when closed), then records itself in a shared log."""

    def __init__(self, name: str, log: list[tuple[str, int]], gated: bool = True) -> None:
        self.name = name
        self.log = log
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.running = threading.Event()

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.running.set()
        self.gate.wait(10)
        self.log.append((self.name, len(requests)))
        return [{"OUT": np.asarray(r.inputs["IN"])} for r in requests]

    def close(self) -> None:
        pass


def _request() -> BackendRequest:
    return BackendRequest({"IN": np.zeros((1, 1), np.float32)}, ("OUT",))


def test_resource_limits_parse_as_tritons_flag() -> None:
    assert ResourceLimit.parse("R1:10") == ResourceLimit("R1", 10, None)
    assert ResourceLimit.parse("R2:5:1") == ResourceLimit("R2", 5, 1)
    for bad in ("R1", "R1:x", ":3", "R1:1:2:3"):
        with pytest.raises(ValueError, match="expected <name>:<count>"):
            ResourceLimit.parse(bad)


def test_registration_refuses_what_triton_refuses() -> None:
    needs_four = Claim("a", (("resource1", False, 4),), device=0)
    with pytest.raises(InvalidArgument) as caught:
        RateLimiter([ResourceLimit("resource1", 3)]).register([needs_four])
    assert str(caught.value) == (
        'Resource count for "resource1" is limited to 3 which will prevent scheduling of one or more model '
        "instances, the minimum required count is 4"
    )
    # A count for another device only leaves none for this one.
    with pytest.raises(InvalidArgument, match='"resource1" is limited to 0 which'):
        RateLimiter([ResourceLimit("resource1", 10, 10)]).register([needs_four])
    limiter = RateLimiter()
    limiter.register([Claim("b", (("resource2", True, 2),), device=0)])
    with pytest.raises(InvalidArgument) as caught:
        limiter.register([Claim("c", (("resource2", False, 2),), device=0)])
    assert str(caught.value) == (
        'Resource "resource2" is present as both global and device-specific resource in the model configuration.'
    )
    RateLimiter([ResourceLimit("resource1", 4)]).register([needs_four])  # enough


def _schedulers(
    limiter: RateLimiter, log: list[tuple[str, int]], *needs: tuple[str, int, int], gated: bool = True
) -> list[tuple[DefaultScheduler, GatedInstance]]:
    made = []
    for name, count, priority in needs:
        instance = GatedInstance(name, log, gated)
        claim = Claim(name, (("R", False, count),), device=0, priority=priority)
        made.append((DefaultScheduler(name, [instance], 0.0, limiter, [claim]), instance))
    return made


@pytest.mark.parametrize(("limits", "together"), [((), False), ((ResourceLimit("R", 6),), True)])
def test_models_share_resources_across_schedulers(limits: tuple[ResourceLimit, ...], together: bool) -> None:
    log: list[tuple[str, int]] = []
    limiter = RateLimiter(limits)
    (a, gate_a), (b, gate_b) = _schedulers(limiter, log, ("a", 4, 1), ("b", 2, 1))

    async def go() -> None:
        first = asyncio.ensure_future(a.execute(_request()))
        await asyncio.to_thread(gate_a.running.wait, 10)
        second = asyncio.ensure_future(b.execute(_request()))
        # With 4 copies of R (the most one instance needs), b waits for a; with 6 both run at once.
        assert await asyncio.to_thread(gate_b.running.wait, 0.5 if not together else 10) is together
        gate_a.gate.set()
        gate_b.gate.set()
        await asyncio.gather(first, second)

    try:
        asyncio.run(go())
    finally:
        a.stop()
        b.stop()
    assert sorted(log) == [("a", 1), ("b", 1)]
    assert log[0][0] == "a" or together


def test_priorities_share_turns_in_proportion() -> None:
    """Two models compete for one resource: priority 1 gets twice the turns of priority 2."""
    log: list[tuple[str, int]] = []
    limiter = RateLimiter([ResourceLimit("R", 1)])
    (fast, _), (slow, _) = _schedulers(limiter, log, ("p1", 1, 1), ("p2", 1, 2), gated=False)

    async def go() -> None:
        await asyncio.gather(*[s.execute(_request()) for s in (fast, slow) for _ in range(30)])

    try:
        asyncio.run(go())
    finally:
        fast.stop()
        slow.stop()
    first_30 = [name for name, _ in log[:30]]
    assert 18 <= first_30.count("p1") <= 22, first_30


def test_priority_one_takes_the_first_two_of_every_three_turns() -> None:
    """Both instances always wait for the one resource: the order is Triton's, p1 p1 p2 repeated (the
    phase matters to Triton's own test, which counts the turns up to a cut-off)."""
    limiter = RateLimiter([ResourceLimit("R", 1)])
    claims = [Claim(name, (("R", False, 1),), 0, priority) for name, priority in (("p1", 1), ("p2", 2))]
    limiter.register(claims)
    owners = [object(), object()]
    order = []

    async def go() -> None:
        for _ in range(9):
            for owner, claim in zip(owners, claims, strict=True):
                limiter.wait(owner, claim, lambda: None)
            (chosen,) = [claim for claim in claims if limiter.can_run(claim)]
            assert limiter.acquire(chosen)
            order.append(chosen.label)
            limiter.release(chosen)
            await asyncio.sleep(0)  # the wake-ups run: the waiters are gone until they wait again

    asyncio.run(go())
    assert order == ["p1", "p1", "p2"] * 3


def test_a_batcher_blocked_by_resources_forms_a_full_batch() -> None:
    log: list[tuple[str, int]] = []
    limiter = RateLimiter()
    holder = GatedInstance("holder", log)
    hold = DefaultScheduler("holder", [holder], 0.0, limiter, [Claim("h", (("R", False, 1),), 0)])
    batched_instance = GatedInstance("batched", log, gated=False)
    config = BatcherConfig(BatchPolicy(4, (1, 2, 3, 4), 0.0))
    batcher = DynamicBatcher("batched", config, [batched_instance], None, limiter=limiter,
                             claims=[Claim("b", (("R", False, 1),), 0)])  # fmt: skip

    async def go() -> None:
        held = asyncio.ensure_future(hold.execute(_request()))
        await asyncio.to_thread(holder.running.wait, 10)
        waiting = [asyncio.ensure_future(batcher.execute(_request())) for _ in range(4)]
        await asyncio.sleep(0)
        assert batcher.pending() == 4  # preferred size 1 would run at once, but the resource is held
        holder.gate.set()
        await asyncio.gather(held, *waiting)

    try:
        asyncio.run(go())
    finally:
        hold.stop()
        batcher.stop()
    assert log == [("holder", 1), ("batched", 4)]


def test_a_model_whose_resources_cannot_be_had_fails_to_load(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "simple", tmp_path / "simple")
    with (tmp_path / "simple" / "config.pbtxt").open("a") as config:
        config.write(
            'instance_group [{ kind: KIND_CPU count: 1 rate_limiter { resources [{ name: "resource1" count: 4 }] } }]\n'
        )
    settings = ServerSettings(
        model_repositories=(tmp_path,), rate_limit=True, rate_limit_resources=(ResourceLimit("resource1", 1),)
    )
    manager = ModelManager(settings)
    manager.start()
    try:
        (row,) = manager.index()
        assert row["state"] == "UNAVAILABLE"
        assert 'Resource count for "resource1" is limited to 1 which will prevent scheduling' in row["reason"]
    finally:
        manager.stop()
