from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, BackendResult
from nereid.errors import InternalError
from nereid.scheduling.default import DefaultScheduler


class RecordingInstance:
    """Adds one to its input and records which thread ran it; can be made to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.threads: list[int] = []
        self.fail = fail
        self.closed = False

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.threads.append(threading.get_ident())
        if self.fail:
            raise ValueError("broken model")
        return [{"OUT": np.asarray(r.inputs["IN"]) + 1} for r in requests]

    def close(self) -> None:
        self.closed = True


def _request(value: int) -> BackendRequest:
    return BackendRequest({"IN": np.array([value])}, ("OUT",))


def _run(scheduler: DefaultScheduler, count: int) -> list[np.ndarray]:
    async def go() -> list[np.ndarray]:
        results = []
        for i in range(count):
            results.append((await scheduler.execute(_request(i)))["OUT"])
        return results

    return asyncio.run(go())


def test_slow_models_run_on_instance_threads() -> None:
    instance = RecordingInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=0.0)
    try:
        assert [int(r[0]) for r in _run(scheduler, 3)] == [1, 2, 3]
    finally:
        scheduler.stop()
    assert threading.get_ident() not in instance.threads
    assert instance.closed


def test_fast_models_run_on_the_event_loop_once_measured() -> None:
    instance = RecordingInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=3600.0)
    try:
        _run(scheduler, 3)
    finally:
        scheduler.stop()
    # the first execution is measured on the instance thread, the next ones run inline
    assert instance.threads[0] != threading.get_ident()
    assert instance.threads[1:] == [threading.get_ident()] * 2


@pytest.mark.parametrize("limit", [0.0, 3600.0])
def test_backend_exceptions_fail_the_request_not_the_scheduler(limit: float) -> None:
    instance = RecordingInstance(fail=True)
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=limit)
    try:
        for _ in range(2):
            with pytest.raises(InternalError, match="broken model"):
                _run(scheduler, 1)
        instance.fail = False
        assert int(_run(scheduler, 1)[0][0]) == 1
    finally:
        scheduler.stop()


def test_busy_instance_is_not_used_inline() -> None:
    instance = RecordingInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=3600.0)
    gate = threading.Event()
    try:
        _run(scheduler, 1)  # measured: inline from now on, unless the instance is busy
        results: list[np.ndarray] = []

        async def go() -> None:
            # Another execution holds the instance's thread until the gate opens.
            held = asyncio.get_running_loop().create_future()
            blocker = BackendRequest({"IN": np.array([0])}, ("OUT",))
            started = _gate_next_execution(instance, gate)
            scheduler.pool.submit(0, (blocker,), lambda *_: held.set_result(None))
            assert await asyncio.to_thread(started.wait, 10)
            task = asyncio.ensure_future(scheduler.execute(_request(5)))
            await asyncio.sleep(0)
            assert not task.done()  # neither inline nor lost: behind the running execution
            gate.set()
            results.append((await task)["OUT"])
            await held

        asyncio.run(go())
        assert int(results[0][0]) == 6
        assert instance.threads[-1] != threading.get_ident()
    finally:
        gate.set()
        scheduler.stop()


def _gate_next_execution(instance: RecordingInstance, gate: threading.Event) -> threading.Event:
    """Make the instance's next execution wait for `gate`; the event returned is set once it waits."""
    started = threading.Event()
    execute = instance.execute

    def gated(requests: Sequence[BackendRequest]) -> list[BackendResult]:
        started.set()
        gate.wait(10)
        instance.execute = execute  # type: ignore[method-assign]
        return execute(requests)

    instance.execute = gated  # type: ignore[method-assign]
    return started
