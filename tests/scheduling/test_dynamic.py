"""The dynamic batcher's asynchronous shell, driven by a fake clock and instances the test releases."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, BackendResult, ExecutionDone, Outputs
from nereid.backends.batching import execute_batched
from nereid.errors import InternalError, InvalidArgument, QueueFull, QueueTimeout
from nereid.scheduling.batch_policy import BatchPolicy
from nereid.scheduling.dynamic import MAX_LAYOUT_VIEWS, BatcherConfig, DynamicBatcher, QueuePolicy
from nereid.statistics import ModelStatistics, RequestTiming

WAIT_S = 10.0  # generous: only a broken batcher waits this long


def _sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GatedInstance:
    """A worker-process-like instance: the test decides when each submission finishes, and how."""

    pipeline_depth = 1

    def __init__(self) -> None:
        self.submissions: list[tuple[list[BackendRequest], ExecutionDone]] = []
        self._changed = asyncio.Event()

    def submit(self, requests: Sequence[BackendRequest], done: ExecutionDone) -> None:
        self.submissions.append((list(requests), done))
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        async def submitted() -> None:
            while len(self.submissions) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(submitted(), WAIT_S)

    def batch(self, index: int) -> list[float]:
        """The first input value of each request of submission `index`: which requests ran together."""
        return [float(r.inputs["X"].flat[0]) for r in self.submissions[index][0]]

    def finish(self, index: int, outcome: list[BackendResult] | BaseException | None = None) -> None:
        requests, done = self.submissions[index]
        done([{"Y": r.inputs["X"] * 2} for r in requests] if outcome is None else outcome)

    async def model_ready(self) -> bool:
        return True

    def unavailable_reason(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def _request(value: float, rows: int = 1, **kwargs: Any) -> BackendRequest:
    return BackendRequest({"X": np.full((rows, 2), value, np.float32)}, ("Y",), **kwargs)


def _config(max_batch_size: int = 8, **kwargs: object) -> BatcherConfig:
    policy = BatchPolicy(
        max_batch_size,
        tuple(kwargs.pop("preferred", ())),  # type: ignore[arg-type]
        float(kwargs.pop("delay_s", 0.0)),  # type: ignore[arg-type]
    )
    return BatcherConfig(policy, **kwargs)  # type: ignore[arg-type]


def _batcher(config: BatcherConfig, *instances: object, clock: Clock | None = None) -> DynamicBatcher:
    return DynamicBatcher("'m' version 1", config, instances, ModelStatistics(), clock or Clock())  # type: ignore[arg-type]


def _send(batcher: DynamicBatcher, request: BackendRequest) -> asyncio.Task[Outputs]:
    return asyncio.ensure_future(batcher.execute(request, RequestTiming()))


async def _settle() -> None:
    """Let every task that can run, run (the batcher acts on the event loop only)."""
    for _ in range(5):
        await asyncio.sleep(0)


@_sync
async def test_requests_that_arrive_in_one_turn_of_the_loop_run_as_one_batch() -> None:
    # With an idle instance and no queue delay, the requests started in the same turn of the event loop
    # (as those read from several sockets in one poll) form one batch, not a batch of the first alone.
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    sent = [_send(batcher, _request(v)) for v in (1, 2, 3)]
    await instance.wait_for(1)
    await _settle()
    assert len(instance.submissions) == 1
    assert instance.batch(0) == [1, 2, 3]
    instance.finish(0)
    assert [float(r["Y"].flat[0]) for r in await asyncio.gather(*sent)] == [2, 4, 6]


@_sync
async def test_an_instance_that_frees_up_takes_the_requests_that_arrived_in_the_same_turn() -> None:
    # The instance's result and a new request come in the same turn: the request waits for no later one.
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    first = _send(batcher, _request(1))
    await instance.wait_for(1)
    second = _send(batcher, _request(2))
    await _settle()
    asyncio.get_running_loop().call_soon(instance.finish, 0)  # the instance's result comes first
    third = _send(batcher, _request(3))
    await instance.wait_for(2)
    assert instance.batch(1) == [2, 3]
    instance.finish(1)
    await asyncio.gather(first, second, third)


@_sync
async def test_requests_queued_while_the_instance_is_busy_run_as_one_batch() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    first = _send(batcher, _request(1))
    await instance.wait_for(1)
    rest = [_send(batcher, _request(v)) for v in (2, 3, 4)]
    await _settle()
    assert batcher.pending() == 3
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [2, 3, 4]
    instance.finish(1)
    for task, value in zip([first, *rest], [1, 2, 3, 4], strict=True):
        np.testing.assert_array_equal((await task)["Y"], np.full((1, 2), value * 2))


@_sync
async def test_preferred_size_goes_at_once_and_the_rest_waits_for_the_delay() -> None:
    clock = Clock()
    instance = GatedInstance()
    batcher = _batcher(_config(preferred=(2,), delay_s=1.0), instance, clock=clock)
    tasks = [_send(batcher, _request(1))]
    await _settle()
    assert instance.submissions == []  # one request is not a preferred size, and it is not due
    tasks += [_send(batcher, _request(2)), _send(batcher, _request(3))]
    await instance.wait_for(1)
    assert instance.batch(0) == [1, 2]
    instance.finish(0)
    await _settle()
    assert len(instance.submissions) == 1 and batcher.pending() == 1
    clock.now += 1.0  # the third request's delay has passed: the timer sends it
    await instance.wait_for(2)
    assert instance.batch(1) == [3]
    instance.finish(1)
    await asyncio.gather(*tasks)


@_sync
async def test_a_batch_never_passes_the_maximum_and_shapes_do_not_mix() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(max_batch_size=4), instance)
    tasks = [_send(batcher, _request(0))]
    await instance.wait_for(1)
    tasks += [_send(batcher, _request(1, rows=3)), _send(batcher, _request(2, rows=2))]
    odd = BackendRequest({"X": np.full((1, 5), 9.0, np.float32)}, ("Y",))
    tasks.append(_send(batcher, odd))
    await _settle()
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [1]  # 3 + 2 rows would pass the maximum of 4
    instance.finish(1)
    await instance.wait_for(3)
    assert instance.batch(2) == [2]  # the (1, 5) request has another shape
    instance.finish(2)
    await instance.wait_for(4)
    assert instance.batch(3) == [9]
    instance.finish(3)
    await asyncio.gather(*tasks)


@_sync
async def test_requests_of_one_layout_share_the_view_of_the_first_and_the_table_is_bounded() -> None:
    # A frontend's layout fixes input names and shapes, so the batcher reads the policy's view (batch
    # size and shapes) off the first request of a layout and keeps it for the next ones.
    instance = GatedInstance()
    batcher = _batcher(_config(max_batch_size=8), instance)
    tasks = [_send(batcher, _request(0))]
    await instance.wait_for(1)
    layout, other = object(), object()
    tasks.append(_send(batcher, _request(1, rows=3, layout=layout)))
    # the same layout: counted by the view kept for it, 3 rows (a frontend never gives a layout's
    # request other shapes; this one does, to show that they are not read again)
    tasks.append(_send(batcher, _request(2, rows=1, layout=layout)))
    wide = BackendRequest({"X": np.full((1, 5), 9.0, np.float32)}, ("Y",), layout=other)
    tasks.append(_send(batcher, wide))
    await _settle()
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [1, 2]  # the other layout's shape differs
    instance.finish(1)
    await instance.wait_for(3)
    assert instance.batch(2) == [9]
    instance.finish(2)
    await asyncio.gather(*tasks)
    statistics = batcher._statistics
    assert statistics is not None and statistics.batch_executions() == {1: 2, 6: 1}
    for _ in range(MAX_LAYOUT_VIEWS + 5):
        tasks = [_send(batcher, _request(3, layout=object()))]
        await instance.wait_for(len(instance.submissions) + 1)
        instance.finish(len(instance.submissions) - 1)
        await asyncio.gather(*tasks)
    assert 0 < len(batcher._layout_views) <= MAX_LAYOUT_VIEWS


@_sync
async def test_ragged_inputs_let_different_shapes_share_a_batch() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(ragged_inputs=frozenset({"X"})), instance)
    tasks = [_send(batcher, _request(0))]
    await instance.wait_for(1)
    wide = BackendRequest({"X": np.full((1, 5), 9.0, np.float32)}, ("Y",))
    tasks += [_send(batcher, _request(1)), _send(batcher, wide)]
    await _settle()
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [1, 9]  # without allow_ragged_batch the (1, 5) request would wait
    instance.finish(1)
    await asyncio.gather(*tasks)


@_sync
async def test_higher_priority_levels_run_first() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(max_batch_size=1, priority_levels=3, default_priority_level=2), instance)
    tasks = [_send(batcher, _request(0))]
    await instance.wait_for(1)
    tasks += [
        _send(batcher, _request(1)),  # priority 0: the default level, 2
        _send(batcher, _request(2, priority=3)),
        _send(batcher, _request(3, priority=1)),
        _send(batcher, _request(4, priority=99)),  # beyond the levels: the default level
    ]
    await _settle()
    order = []
    for index in range(5):
        await instance.wait_for(index + 1)
        order += instance.batch(index)
        instance.finish(index)
    assert order == [0, 3, 1, 4, 2]
    await asyncio.gather(*tasks)


@_sync
async def test_timeout_reject_fails_the_request_and_delay_sends_it_behind_the_others() -> None:
    clock = Clock()
    instance = GatedInstance()
    reject = QueuePolicy(default_timeout_us=1000)
    delay = QueuePolicy(delay_on_timeout=True, allow_timeout_override=True)
    config = _config(
        max_batch_size=1,
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=reject,
        level_queue_policies={2: delay},
    )
    batcher = _batcher(config, instance, clock=clock)
    busy = _send(batcher, _request(0))
    await instance.wait_for(1)
    rejected = _send(batcher, _request(1))
    delayed = _send(batcher, _request(2, priority=2, timeout_us=500))
    await _settle()
    clock.now += 0.002
    with pytest.raises(QueueTimeout, match="Request timeout expired"):
        await asyncio.wait_for(rejected, WAIT_S)
    on_time = _send(batcher, _request(3, priority=2))  # no timeout of its own: its level has none
    await _settle()
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [3]  # the delayed request goes after the one that did not time out
    instance.finish(1)
    await instance.wait_for(3)
    assert instance.batch(2) == [2]
    instance.finish(2)
    await asyncio.gather(busy, delayed, on_time)


@_sync
async def test_a_full_queue_refuses_at_once() -> None:
    instance = GatedInstance()
    config = _config(max_batch_size=1, default_queue_policy=QueuePolicy(max_queue_size=2))
    batcher = _batcher(config, instance)
    tasks = [_send(batcher, _request(0))]
    await instance.wait_for(1)  # running, so not queued
    tasks += [_send(batcher, _request(1)), _send(batcher, _request(2))]
    await _settle()
    with pytest.raises(QueueFull, match="Exceeds maximum queue size"):
        await batcher.execute(_request(3))
    for index in range(3):
        await instance.wait_for(index + 1)
        instance.finish(index)
    await asyncio.gather(*tasks)


@_sync
async def test_preserve_ordering_holds_later_answers_until_earlier_ones() -> None:
    first_instance, second_instance = GatedInstance(), GatedInstance()
    batcher = _batcher(_config(preserve_ordering=True), first_instance, second_instance)
    early = _send(batcher, _request(1))
    await first_instance.wait_for(1)
    late = _send(batcher, _request(2))
    await second_instance.wait_for(1)
    second_instance.finish(0)
    await _settle()
    assert not late.done()
    first_instance.finish(0)
    assert (await early)["Y"][0, 0] == 2 and (await late)["Y"][0, 0] == 4


@_sync
async def test_without_preserve_ordering_answers_go_as_they_finish() -> None:
    first_instance, second_instance = GatedInstance(), GatedInstance()
    batcher = _batcher(_config(), first_instance, second_instance)
    early = _send(batcher, _request(1))
    await first_instance.wait_for(1)
    late = _send(batcher, _request(2))
    await second_instance.wait_for(1)
    second_instance.finish(0)
    assert (await late)["Y"][0, 0] == 4
    assert not early.done()
    first_instance.finish(0)
    await early


@_sync
async def test_a_cancelled_request_leaves_the_queue() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    busy = _send(batcher, _request(0))
    await instance.wait_for(1)
    leaving, staying = _send(batcher, _request(1)), _send(batcher, _request(2))
    await _settle()
    leaving.cancel()
    await _settle()
    assert batcher.pending() == 1
    instance.finish(0)
    await instance.wait_for(2)
    assert instance.batch(1) == [2]
    instance.finish(1)
    await asyncio.gather(busy, staying)


@_sync
async def test_a_failed_execution_fails_every_request_of_its_batch() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    busy = _send(batcher, _request(0))
    await instance.wait_for(1)
    batch = [_send(batcher, _request(v)) for v in (1, 2, 3)]
    await _settle()
    instance.finish(0)
    await busy
    await instance.wait_for(2)
    instance.finish(1, RuntimeError("worker crashed"))
    for task in batch:
        with pytest.raises(InternalError, match="RuntimeError: worker crashed"):
            await task


@_sync
async def test_an_error_for_one_request_reaches_that_request_only() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    busy = _send(batcher, _request(0))
    await instance.wait_for(1)
    good, bad = _send(batcher, _request(1)), _send(batcher, _request(2))
    await _settle()
    instance.finish(0)
    await instance.wait_for(2)
    instance.finish(1, [{"Y": np.zeros((1, 2))}, InvalidArgument("not this one")])
    assert (await good)["Y"].shape == (1, 2)
    with pytest.raises(InvalidArgument, match="not this one"):
        await bad
    await busy


class GatedBlockingInstance:
    """A blocking instance (like ONNX Runtime's) that concatenates each batch into one run."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.runs: list[tuple[int, ...]] = []

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.gate.wait(WAIT_S)
        return execute_batched(requests, self._run)

    def _run(self, request: BackendRequest) -> Outputs:
        x = request.inputs["X"]
        self.runs.append(x.shape)
        return {"Y": x * 2, "ROW": np.arange(x.shape[0])}

    def close(self) -> None:
        pass


@_sync
async def test_outputs_of_a_concatenated_batch_reach_the_right_requests() -> None:
    instance = GatedBlockingInstance()
    statistics = ModelStatistics()
    batcher = DynamicBatcher("'m' version 1", _config(), [instance], statistics)
    try:
        busy = _send(batcher, _request(0))
        await _settle()
        tasks = [_send(batcher, _request(v, rows=v)) for v in (1, 2, 3)]
        await _settle()
        instance.gate.set()
        await busy
        results = await asyncio.gather(*tasks)
        assert instance.runs == [(1, 2), (6, 2)]
        for value, result in zip((1, 2, 3), results, strict=True):
            np.testing.assert_array_equal(result["Y"], np.full((value, 2), value * 2))
        stats = statistics.to_json("m", "1")
        assert (stats["execution_count"], stats["inference_count"]) == (2, 7)
        assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 6]
    finally:
        await asyncio.to_thread(batcher.stop)


@_sync
async def test_stopping_fails_what_is_still_queued() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    busy = _send(batcher, _request(0))
    await instance.wait_for(1)
    queued = _send(batcher, _request(1))
    await _settle()
    await asyncio.to_thread(batcher.stop)
    with pytest.raises(Exception, match="is unloading"):
        await asyncio.wait_for(queued, WAIT_S)
    instance.finish(0)
    await busy


def test_triton_delay_scheduler_holds_the_first_decision_until_that_many_are_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=N, Triton's testing hook: nothing runs until N requests are queued,
    then the batcher decides as usual from then on."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")

    async def go() -> None:
        instance = GatedInstance()
        batcher = _batcher(_config(max_batch_size=2), instance)
        tasks = [_send(batcher, _request(1)), _send(batcher, _request(2))]
        await _settle()
        assert instance.submissions == [] and batcher.pending() == 2
        tasks.append(_send(batcher, _request(3)))
        await instance.wait_for(1)
        assert instance.batch(0) == [1, 2]
        instance.finish(0)
        await instance.wait_for(2)
        instance.finish(1)
        tasks.append(_send(batcher, _request(4)))  # the hold is over: one request runs at once
        await instance.wait_for(3)
        assert instance.batch(2) == [4]
        instance.finish(2)
        await asyncio.gather(*tasks)

    asyncio.run(go())


@_sync
async def test_a_request_queued_with_a_callback_is_answered_once_and_not_after_it_is_withdrawn() -> None:
    instance = GatedInstance()
    batcher = _batcher(_config(), instance)
    answered: list[tuple[str, object]] = []
    batcher.enqueue(_request(1), RequestTiming(), lambda result: answered.append(("kept", result)))
    gone = batcher.enqueue(_request(2), RequestTiming(), lambda result: answered.append(("gone", result)))
    await instance.wait_for(1)
    assert instance.batch(0) == [1, 2]
    batcher.withdraw(gone)  # already running: its result is dropped
    instance.finish(0)
    await _settle()
    assert [name for name, _ in answered] == ["kept"]
    result = answered[0][1]
    assert isinstance(result, dict) and result["Y"][0, 0] == 2
    queued = batcher.enqueue(_request(3), RequestTiming(), lambda result: answered.append(("queued", result)))
    batcher.withdraw(queued)  # still queued: it leaves the queue
    assert batcher.pending() == 0
    await _settle()
    assert len(instance.submissions) == 1 and len(answered) == 1
