from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, BackendResult
from nereid.errors import InternalError, Unavailable
from nereid.scheduling.default import DefaultScheduler
from nereid.statistics import RequestTiming


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


def test_a_request_enqueued_with_a_callback_is_answered_by_it() -> None:
    instance = RecordingInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=3600.0)
    answers: list[BackendResult] = []
    try:

        async def go() -> None:
            loop = asyncio.get_running_loop()
            answered = loop.create_future()

            def done(result: BackendResult) -> None:
                answers.append(result)
                answered.set_result(None)

            timing = RequestTiming()
            job = scheduler.enqueue(_request(1), timing, done)  # first: measured on the instance thread
            assert answers == [] and job.done is done
            await answered
            assert job.done is None and timing.infer_ns > 0
            # measured fast: the next one runs on the event loop and is answered before enqueue returns
            scheduler.enqueue(_request(2), None, answers.append)
            assert len(answers) == 2

        asyncio.run(go())
        assert [int(np.asarray(a["OUT"])[0]) for a in answers] == [2, 3]  # type: ignore[index]
    finally:
        scheduler.stop()


def test_withdrawn_requests_are_skipped_and_never_answered() -> None:
    instance = RecordingInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=0.0)
    gate = threading.Event()
    answers: list[int] = []
    try:

        async def go() -> None:
            loop = asyncio.get_running_loop()
            started = _gate_next_execution(instance, gate)
            first = loop.create_future()
            scheduler.enqueue(_request(0), None, first.set_result)
            assert await asyncio.to_thread(started.wait, 10)
            held = scheduler.enqueue(_request(1), None, lambda r: answers.append(1))  # behind the running one
            waiting = scheduler.enqueue(_request(2), None, lambda r: answers.append(2))  # for a free instance
            assert scheduler.pending() == 2
            scheduler.withdraw(held)
            scheduler.withdraw(waiting)
            last = loop.create_future()
            scheduler.enqueue(_request(3), None, last.set_result)
            gate.set()
            assert int(np.asarray((await first)["OUT"])[0]) == 1
            assert int(np.asarray((await last)["OUT"])[0]) == 4

        asyncio.run(go())
        assert answers == []
        assert len(instance.threads) == 2  # the withdrawn requests never ran
    finally:
        gate.set()
        scheduler.stop()


def test_enqueue_on_an_unloading_model_is_refused() -> None:
    scheduler = DefaultScheduler("m", [RecordingInstance()])
    scheduler.stop()
    with pytest.raises(Unavailable, match="model m is unloading"):
        scheduler.enqueue(_request(0), None, lambda r: None)
