"""InstancePool with gated fake instances: dispatch, readiness, crashes, one result per future, stopping."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, BackendResult, ExecutionDone
from nereid.errors import InternalError, NereidError, Unavailable
from nereid.scheduling.base import resolve
from nereid.scheduling.default import DefaultScheduler
from nereid.scheduling.instances import InstancePool


class GatedInstance:
    """A blocking instance: each execution waits for the gate, then adds one; records its threads."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.threads: list[int] = []
        self.fail = fail
        self.closed = False
        self.results = 1  # results returned per request (1: correct)

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.threads.append(threading.get_ident())
        self.started.release()
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return [{"OUT": np.asarray(r.inputs["IN"]) + 1} for r in requests] * self.results

    def close(self) -> None:
        self.closed = True


class WorkerInstance:
    """An instance whose model runs elsewhere: the test finishes each submission by hand."""

    def __init__(self, depth: int = 2) -> None:
        self.pipeline_depth = depth
        self.submissions: list[tuple[Sequence[BackendRequest], ExecutionDone]] = []
        self.reason: str | None = None
        self.ready = True
        self.closed = False

    def submit(self, requests: Sequence[BackendRequest], done: ExecutionDone) -> None:
        self.submissions.append((requests, done))

    async def model_ready(self) -> bool:
        return self.ready

    def unavailable_reason(self) -> str | None:
        return self.reason

    def close(self) -> None:
        self.closed = True


def _request(value: int) -> BackendRequest:
    return BackendRequest({"IN": np.array([value])}, ("OUT",))


class Recorder:
    """A Completion that records each call and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[BackendResult], int]] = []
        self.event = asyncio.Event()

    def __call__(self, results: list[BackendResult], started_ns: int, ended_ns: int) -> None:
        assert ended_ns >= started_ns
        self.calls.append((results, threading.get_ident()))
        self.event.set()


def test_blocking_instances_run_on_their_threads_and_report_on_the_loop() -> None:
    instances = [GatedInstance(), GatedInstance()]
    pool = InstancePool("m", instances)

    async def go() -> None:
        first, second = Recorder(), Recorder()
        assert pool.idle() == 0
        pool.submit(0, [_request(1)], first)
        assert pool.idle() == 1 and pool.with_room() == 1  # depth 1: a busy instance has no room
        pool.submit(1, [_request(2), _request(3)], second)
        assert pool.idle() == -1 and pool.with_room() == -1
        for instance in instances:
            instance.gate.set()
        await first.event.wait()
        await second.event.wait()
        assert [int(r["OUT"][0]) for r in second.calls[0][0]] == [3, 4]  # type: ignore[index]
        assert {first.calls[0][1], second.calls[0][1]} == {threading.get_ident()}
        assert pool.idle() == 0

    try:
        asyncio.run(go())
    finally:
        pool.stop(lambda: None)
    loop_thread = threading.get_ident()
    assert instances[0].threads[0] != loop_thread and instances[1].threads[0] != loop_thread
    assert instances[0].threads[0] != instances[1].threads[0]
    assert all(i.closed for i in instances)


def test_thread_depth_holds_the_next_execution_behind_the_running_one() -> None:
    instance = GatedInstance()
    pool = InstancePool("m", [instance], thread_depth=2)

    async def go() -> None:
        first, second = Recorder(), Recorder()
        pool.submit(0, [_request(1)], first)
        assert pool.idle() == -1 and pool.with_room() == 0
        pool.submit(0, [_request(2)], second)
        assert pool.with_room() == -1 and pool.outstanding(0) == 2
        await asyncio.to_thread(instance.started.acquire, True, 10)
        assert not second.calls  # the second waits for the first on the same thread
        instance.gate.set()
        await second.event.wait()
        assert len(first.calls) == 1 and pool.outstanding(0) == 0

    try:
        asyncio.run(go())
    finally:
        pool.stop(lambda: None)


def test_worker_instances_take_submissions_up_to_their_pipeline_depth() -> None:
    worker = WorkerInstance(depth=2)
    pool = InstancePool("m", [worker])

    async def go() -> None:
        done = [Recorder(), Recorder()]
        pool.submit(0, [_request(1)], done[0])
        assert pool.with_room() == 0
        pool.submit(0, [_request(2)], done[1])
        assert pool.with_room() == -1
        worker.pipeline_depth = 3  # the Python backend raises it while a BLS call waits
        assert pool.with_room() == 0
        worker.submissions[1][1]([{"OUT": np.array([3])}])
        worker.submissions[0][1](Unavailable("the worker died"))
        assert [len(r.calls) for r in done] == [1, 1]
        (error,) = done[0].calls[0][0]
        assert isinstance(error, Unavailable)  # a NereidError reaches the request unchanged
        assert pool.idle() == 0

    asyncio.run(go())
    pool.stop(lambda: None)
    assert worker.closed


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (ValueError("broken model"), "model m: ValueError: broken model"),
        (Unavailable("instance restarting"), "instance restarting"),
    ],
)
def test_a_crashed_execution_fails_each_of_its_requests_and_the_instance_goes_on(
    failure: BaseException, expected: str
) -> None:
    instance = GatedInstance(fail=failure)
    instance.gate.set()
    pool = InstancePool("m", [instance])

    async def go() -> None:
        crashed, after = Recorder(), Recorder()
        pool.submit(0, [_request(1), _request(2)], crashed)
        await crashed.event.wait()
        errors = crashed.calls[0][0]
        assert len(errors) == 2 and all(isinstance(e, NereidError) and str(e) == expected for e in errors)
        instance.fail = None
        pool.submit(0, [_request(5)], after)
        await after.event.wait()
        assert int(after.calls[0][0][0]["OUT"][0]) == 6  # type: ignore[index]

    try:
        asyncio.run(go())
    finally:
        pool.stop(lambda: None)


def test_a_wrong_number_of_results_is_an_internal_error() -> None:
    instance = GatedInstance()
    instance.gate.set()
    instance.results = 2
    pool = InstancePool("m", [instance])

    async def go() -> None:
        done = Recorder()
        pool.submit(0, [_request(1)], done)
        await done.event.wait()
        (error,) = done.calls[0][0]
        assert isinstance(error, InternalError) and "returned 2 results for 1 requests" in str(error)

    try:
        asyncio.run(go())
    finally:
        pool.stop(lambda: None)


def test_a_worker_whose_submit_raises_or_reports_twice_completes_once() -> None:
    class Raising(WorkerInstance):
        def submit(self, requests: Sequence[BackendRequest], done: ExecutionDone) -> None:
            raise OSError("pipe closed")

    raising, twice = Raising(), WorkerInstance()
    pool = InstancePool("m", [raising, twice])

    async def go() -> None:
        first, second = Recorder(), Recorder()
        pool.submit(0, [_request(1)], first)
        (error,) = first.calls[0][0]
        assert isinstance(error, InternalError) and "OSError: pipe closed" in str(error)
        assert pool.outstanding(0) == 0
        pool.submit(1, [_request(1)], second)
        report = twice.submissions[0][1]
        report([{"OUT": np.array([2])}])
        report([{"OUT": np.array([2])}])
        assert len(second.calls) == 1 and pool.outstanding(1) == 0

    asyncio.run(go())
    pool.stop(lambda: None)


def test_readiness_comes_from_the_worker_instances() -> None:
    workers = [WorkerInstance(), WorkerInstance()]
    pool = InstancePool("m", workers)
    assert pool.unavailable_reason() is None
    workers[0].reason = "worker 0 restarting"
    assert pool.unavailable_reason() is None  # one instance can still serve
    workers[1].reason = "worker 1 failed"
    assert pool.unavailable_reason() == "worker 0 restarting; worker 1 failed"
    assert asyncio.run(pool.model_ready())
    workers[1].ready = False
    assert not asyncio.run(pool.model_ready())
    blocking = InstancePool("m", [GatedInstance()])
    try:
        assert blocking.unavailable_reason() is None and asyncio.run(blocking.model_ready())
    finally:
        blocking.stop(lambda: None)


def test_only_fast_idle_blocking_instances_run_inline() -> None:
    instance = GatedInstance()
    instance.gate.set()
    pool = InstancePool("m", [instance], inline_limit_s=3600.0)

    async def go() -> None:
        assert pool.inline_index() == -1  # not measured yet
        first = Recorder()
        pool.submit(0, [_request(1)], first)
        await first.event.wait()
        assert pool.inline_index() == 0
        inline = Recorder()
        pool.run_inline(0, [_request(2)], inline)
        assert inline.calls and instance.threads[-1] == threading.get_ident()

    try:
        asyncio.run(go())
    finally:
        pool.stop(lambda: None)
    workers = InstancePool("m", [WorkerInstance()], inline_limit_s=3600.0)
    assert workers.inline_index() == -1


def test_stop_fails_queued_requests_lets_running_ones_finish_and_refuses_new_ones() -> None:
    instance = GatedInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=0.0)
    outcomes: list[object] = []

    async def go() -> None:
        tasks = [asyncio.ensure_future(scheduler.execute(_request(i))) for i in range(4)]
        await asyncio.sleep(0)
        await asyncio.to_thread(instance.started.acquire, True, 10)
        # one running; the one held behind it and the two waiting have not started: three pending
        assert scheduler.pending() == 3
        stopper = asyncio.ensure_future(asyncio.to_thread(scheduler.stop))
        for _ in range(10_000):  # stop() refuses new work at once, then waits for the running execution
            if scheduler.pool.closed:
                break
            await asyncio.sleep(0.001)
        assert scheduler.pool.closed
        instance.gate.set()
        for task in tasks:
            try:
                outcomes.append(int((await task)["OUT"][0]))
            except Unavailable as exc:
                outcomes.append(str(exc))
        await stopper
        with pytest.raises(Unavailable, match="unloading"):
            await scheduler.execute(_request(9))

    asyncio.run(go())
    assert outcomes[:2] == [1, 2]  # running and held: finished
    assert outcomes[2:] == ["model m is unloading"] * 2
    assert instance.closed


def test_a_cancelled_request_is_skipped_while_queued_and_dropped_while_running() -> None:
    instance = GatedInstance()
    scheduler = DefaultScheduler("m", [instance], inline_limit_s=0.0)
    executed: list[int] = []
    original = instance.execute

    def recording(requests: Sequence[BackendRequest]) -> list[BackendResult]:
        executed.extend(int(r.inputs["IN"][0]) for r in requests)
        return original(requests)

    instance.execute = recording  # type: ignore[method-assign]

    async def go() -> None:
        tasks = [asyncio.ensure_future(scheduler.execute(_request(i))) for i in range(4)]
        await asyncio.sleep(0)
        await asyncio.to_thread(instance.started.acquire, True, 10)
        tasks[0].cancel()  # running: its result is dropped
        tasks[1].cancel()  # held on the instance's thread behind it: skipped
        tasks[2].cancel()  # waiting in the scheduler: never submitted
        await asyncio.sleep(0)  # the callers see their cancellation, and withdraw their requests
        instance.gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results[:3])
        assert int(results[3]["OUT"][0]) == 4  # type: ignore[index]

    try:
        asyncio.run(go())
    finally:
        scheduler.stop()
    assert executed == [0, 3]


def test_resolve_settles_a_future_once() -> None:
    async def go() -> None:
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        resolve(future, {"OUT": np.array([1])})
        resolve(future, InternalError("late"))  # dropped
        assert int((await future)["OUT"][0]) == 1
        cancelled: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        cancelled.cancel()
        resolve(cancelled, {"OUT": np.array([1])})  # its caller went away: no InvalidStateError
        assert cancelled.cancelled()

    asyncio.run(go())
