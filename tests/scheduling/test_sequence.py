"""The sequence batcher with fake instances: slots, backlog, idle sequences, batches and implicit state."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import SEQUENCE_END, SEQUENCE_START, BackendRequest, BackendResult
from nereid.errors import InvalidArgument, Unavailable
from nereid.scheduling import SequenceBatcher, create_scheduler
from nereid.statistics import ModelStatistics

STATE = """
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _config(max_batch_size: int, batching: str) -> mc.ModelConfig:
    return text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} sequence_batching {{ {batching} }}', mc.ModelConfig()
    )


class Instance:
    """Adds INPUT to INPUT_STATE (when the model has state); records every execution; can be held at a gate."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[list[BackendRequest]] = []
        self.gate = gate
        self.closed = False

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.calls.append(list(requests))
        if self.gate is not None:
            self.gate.wait(10)
        results: list[BackendResult] = []
        for r in requests:
            total = r.inputs["INPUT"] + r.inputs.get("INPUT_STATE", 0)
            results.append({"OUTPUT": total, "OUTPUT_STATE": total})
        return results

    def close(self) -> None:
        self.closed = True

    def seen(self) -> list[list[int | str]]:
        """The correlation ids of each execution, in order."""
        return [[r.correlation_id for r in call] for call in self.calls]


def _request(
    sequence: int | str, value: int, flags: int = 0, outputs: tuple[str, ...] = ("OUTPUT",)
) -> BackendRequest:
    return BackendRequest(
        {"INPUT": np.array([[value]], dtype=np.int32)}, outputs, correlation_id=sequence, flags=flags
    )


async def _value(scheduler: SequenceBatcher, request: BackendRequest) -> int:
    return int((await scheduler.execute(request))["OUTPUT"][0, 0])


async def _until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


def test_config_with_sequence_batching_gets_the_sequence_batcher() -> None:
    scheduler = create_scheduler("'m' version 1", _config(2, ""), [Instance()], ModelStatistics())
    try:
        assert isinstance(scheduler, SequenceBatcher)
    finally:
        scheduler.stop()


def test_each_sequence_stays_on_one_instance_and_runs_in_order() -> None:
    instances = [Instance(), Instance()]
    scheduler = SequenceBatcher("m", _config(2, "direct { }" + STATE), instances)

    async def one(sequence: int) -> list[int]:
        totals = []
        for step in range(5):
            flags = (SEQUENCE_START if step == 0 else 0) | (SEQUENCE_END if step == 4 else 0)
            totals.append(await _value(scheduler, _request(sequence, sequence, flags)))
        return totals

    async def run() -> list[list[int]]:
        return await asyncio.gather(*(one(s) for s in (1, 2, 3)))

    try:
        results = asyncio.run(run())
    finally:
        scheduler.stop()
    assert results == [[s * (k + 1) for k in range(5)] for s in (1, 2, 3)]
    on = [{c for call in i.seen() for c in call} for i in instances]
    assert on[0].isdisjoint(on[1])
    assert {1, 2} - on[0] and {1, 2} - on[1]  # the first two sequences went to different instances
    assert all(i.closed for i in instances)


def test_a_sequence_waits_in_the_backlog_until_a_slot_frees() -> None:
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(1, "direct { }"), [instance])  # one slot

    async def run() -> None:
        assert await _value(scheduler, _request(1, 10, SEQUENCE_START)) == 10
        waiting = asyncio.create_task(_value(scheduler, _request(2, 20, SEQUENCE_START)))
        await asyncio.sleep(0)  # the task enqueues its request; it has no slot to run in
        assert scheduler.pending() == 1 and scheduler.active_sequences() == 2
        assert instance.seen() == [[1]]
        assert await _value(scheduler, _request(1, 11, SEQUENCE_END)) == 11
        assert await waiting == 20
        assert instance.seen() == [[1], [1], [2]]

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_idle_sequences_are_released_and_late_requests_refused() -> None:
    scheduler = SequenceBatcher("m", _config(2, "max_sequence_idle_microseconds: 500000"), [Instance()])

    async def run() -> None:
        await _value(scheduler, _request(7, 1, SEQUENCE_START))
        await _value(scheduler, _request(8, 1, SEQUENCE_START))
        assert scheduler.active_sequences() == 2
        await _until(lambda: scheduler.active_sequences() == 0)
        with pytest.raises(InvalidArgument, match="for sequence 7 to model 'm' must specify the START flag"):
            await scheduler.execute(_request(7, 1))

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_requests_without_a_sequence_are_refused() -> None:
    scheduler = SequenceBatcher("m", _config(2, ""), [Instance()])

    async def run() -> None:
        with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation ID"):
            await scheduler.execute(_request(0, 1, SEQUENCE_START))
        with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation ID"):
            await scheduler.execute(_request("", 1, SEQUENCE_START))
        with pytest.raises(InvalidArgument, match="sequence abc to model 'm' must specify the START flag"):
            await scheduler.execute(_request("abc", 1))
        assert await _value(scheduler, _request("abc", 4, SEQUENCE_START | SEQUENCE_END)) == 4
        with pytest.raises(InvalidArgument, match="START flag"):  # ended with its first request
            await scheduler.execute(_request("abc", 1))

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_direct_batches_take_one_request_per_slot() -> None:
    gate = threading.Event()
    instance = Instance(gate)
    statistics = ModelStatistics()
    scheduler = SequenceBatcher("m", _config(4, "direct { }"), [instance], statistics=statistics)

    async def run() -> None:
        first = asyncio.create_task(_value(scheduler, _request(1, 1, SEQUENCE_START)))
        await _until(lambda: len(instance.calls) == 1)  # held at the gate
        rest = [
            asyncio.create_task(_value(scheduler, _request(2, 2, SEQUENCE_START))),
            asyncio.create_task(_value(scheduler, _request(1, 3))),
            asyncio.create_task(_value(scheduler, _request(1, 4))),
            asyncio.create_task(_value(scheduler, _request(3, 5, SEQUENCE_START))),
        ]
        await asyncio.sleep(0)
        gate.set()
        assert await first == 1
        assert await asyncio.gather(*rest) == [2, 3, 4, 5]

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    # slot order: sequence 1 holds slot 0, 2 slot 1, 3 slot 2; sequence 1's second request waits a batch
    assert instance.seen() == [[1], [1, 2, 3], [1]]
    stats = statistics.to_json("m", "1")  # one execution per batch, as in Triton
    assert (stats["execution_count"], stats["inference_count"]) == (3, 5)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [(1, 2), (3, 1)]


def test_oldest_batches_take_the_oldest_request_of_each_sequence() -> None:
    gate = threading.Event()
    instance = Instance(gate)
    batching = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }"
    scheduler = SequenceBatcher("m", _config(4, batching), [instance])

    async def run() -> None:
        first = asyncio.create_task(_value(scheduler, _request(1, 1, SEQUENCE_START)))
        await _until(lambda: len(instance.calls) == 1)
        rest = [
            asyncio.create_task(_value(scheduler, _request(2, 2, SEQUENCE_START))),
            asyncio.create_task(_value(scheduler, _request(3, 3, SEQUENCE_START))),
            asyncio.create_task(_value(scheduler, _request(1, 4))),
        ]
        await asyncio.sleep(0)
        gate.set()
        assert await first == 1
        assert await asyncio.gather(*rest) == [2, 3, 4]

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    # the preferred size 2 takes the two oldest (2 and 3); sequence 1's request follows
    assert instance.seen() == [[1], [2, 3], [1]]


def test_implicit_state_per_sequence_reset_on_start_and_hidden_unless_asked() -> None:
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(2, "direct { }" + STATE), [instance])  # both share the instance

    async def run() -> None:
        assert await _value(scheduler, _request("a", 1, SEQUENCE_START)) == 1
        assert await _value(scheduler, _request("b", 100, SEQUENCE_START)) == 100
        assert await _value(scheduler, _request("a", 2)) == 3
        assert await _value(scheduler, _request("b", 5)) == 105
        assert await _value(scheduler, _request("a", 10, SEQUENCE_START)) == 10  # a new start resets it
        plain = await scheduler.execute(_request("a", 1))
        assert set(plain) == {"OUTPUT"}
        asked = await scheduler.execute(_request("a", 1, outputs=("OUTPUT", "OUTPUT_STATE")))
        assert int(asked["OUTPUT_STATE"][0, 0]) == 12
        assert await _value(scheduler, _request("b", 1, SEQUENCE_END)) == 106

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    assert instance.calls[0][0].outputs == ("OUTPUT", "OUTPUT_STATE")  # the model is asked for its state
    assert int(instance.calls[0][0].inputs["INPUT_STATE"][0, 0]) == 0


def test_initial_state_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "start.bin").write_bytes(np.array([1000], dtype=np.int32).tobytes())
    state = STATE.replace(
        "dims: [ 1 ] }",
        'dims: [ 1 ] initial_state { name: "s" data_type: TYPE_INT32 dims: [ 1 ] data_file: "start.bin" } }',
    )
    scheduler = SequenceBatcher("m", _config(2, state), [Instance()], tmp_path)

    async def run() -> None:
        assert await _value(scheduler, _request(1, 5, SEQUENCE_START)) == 1005
        assert await _value(scheduler, _request(1, 5, SEQUENCE_END)) == 1010

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_a_failing_execution_fails_its_requests_and_the_sequence_goes_on() -> None:
    class Failing(Instance):
        def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
            if int(requests[0].inputs["INPUT"][0, 0]) < 0:
                raise ValueError("negative")
            return super().execute(requests)

    scheduler = SequenceBatcher("m", _config(2, STATE), [Failing()])

    async def run() -> None:
        assert await _value(scheduler, _request(1, 5, SEQUENCE_START)) == 5
        with pytest.raises(Exception, match="ValueError: negative"):
            await scheduler.execute(_request(1, -1))
        assert await _value(scheduler, _request(1, 5, SEQUENCE_END)) == 10

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


class PipelinedInstance:
    """An AsyncModelInstance whose executions the test finishes by hand."""

    pipeline_depth = 2

    def __init__(self) -> None:
        self.submissions: list[
            tuple[list[BackendRequest], Callable[[list[BackendResult] | BaseException], None]]
        ] = []

    def submit(
        self, requests: Sequence[BackendRequest], done: Callable[[list[BackendResult] | BaseException], None]
    ) -> None:
        self.submissions.append((list(requests), done))

    def finish(self, index: int) -> None:
        requests, done = self.submissions[index]
        done(
            [
                {
                    "OUTPUT": r.inputs["INPUT"] + r.inputs["INPUT_STATE"],
                    "OUTPUT_STATE": r.inputs["INPUT"] + r.inputs["INPUT_STATE"],
                }
                for r in requests
            ]
        )

    async def model_ready(self) -> bool:
        return True

    def unavailable_reason(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def test_a_worker_takes_the_next_batch_while_it_runs_one_leaving_out_running_sequences() -> None:
    instance = PipelinedInstance()
    scheduler = SequenceBatcher("m", _config(4, "direct { }" + STATE), [instance])

    async def run() -> None:
        a1 = asyncio.create_task(_value(scheduler, _request("a", 1, SEQUENCE_START)))
        await _until(lambda: len(instance.submissions) == 1)
        a2 = asyncio.create_task(_value(scheduler, _request("a", 2)))
        b1 = asyncio.create_task(_value(scheduler, _request("b", 10, SEQUENCE_START)))
        await _until(lambda: len(instance.submissions) == 2)  # b goes on while a runs; a's next waits
        assert [[r.correlation_id for r in s[0]] for s in instance.submissions] == [["a"], ["b"]]
        instance.finish(0)
        assert await a1 == 1
        await _until(lambda: len(instance.submissions) == 3)
        assert [r.correlation_id for r in instance.submissions[2][0]] == ["a"]
        instance.finish(1)
        instance.finish(2)
        assert await b1 == 10
        assert await a2 == 3  # it saw the state a's first request left

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_requests_batched_already_are_refused() -> None:
    scheduler = SequenceBatcher("'m' version 1", _config(4, "direct { }"), [Instance()])
    batched = BackendRequest(
        {"INPUT": np.array([[1], [2]], dtype=np.int32)}, ("OUTPUT",), correlation_id=1, flags=SEQUENCE_START
    )

    async def run() -> None:
        with pytest.raises(InvalidArgument) as refused:
            await scheduler.execute(batched)
        assert refused.value.message == (
            "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher"
        )
        assert scheduler.active_sequences() == 0  # the refused START began no sequence
        assert await _value(scheduler, _request(1, 5, SEQUENCE_START | SEQUENCE_END)) == 5

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()


def test_delay_hooks_hold_every_slot_until_enough_requests_wait_in_slots_and_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=3 with TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1: nothing runs until three
    requests wait in slots and one in the backlog; then the batches run as they would have."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "1")
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(2, "direct { }"), [instance])  # two slots

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def run() -> None:
        tasks = [
            asyncio.create_task(_value(scheduler, _request(1, 1, SEQUENCE_START))),
            asyncio.create_task(_value(scheduler, _request(2, 2, SEQUENCE_START))),
            asyncio.create_task(_value(scheduler, _request(1, 3, SEQUENCE_END))),
        ]
        await settle()
        assert instance.calls == [] and scheduler.pending() == 3  # three seated, none in the backlog
        tasks.append(asyncio.create_task(_value(scheduler, _request(3, 4, SEQUENCE_START | SEQUENCE_END))))
        await settle()  # the backlog holds one: the hold lifts
        assert await asyncio.gather(*tasks) == [1, 2, 3, 4]
        # the hold is gone for good: a new sequence runs at once
        assert await _value(scheduler, _request(4, 9, SEQUENCE_START | SEQUENCE_END)) == 9

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    assert instance.seen()[0] == [1, 2]  # the first batch had both seated sequences
    assert [c for call in instance.seen() for c in call] == [1, 2, 1, 3, 4]


def test_direct_statistics_count_the_null_rows_triton_fills_below_the_highest_slot() -> None:
    """Triton runs a direct batch from slot 0 to the highest ready slot, null requests in the gaps: its
    statistics count those rows in the batch size, not as inferences."""
    instance = Instance()
    statistics = ModelStatistics()
    scheduler = SequenceBatcher("m", _config(4, "direct { }"), [instance], statistics=statistics)

    async def run() -> None:
        for sequence in (1, 2, 3):  # one after the other: slots 0, 1 and 2, each runs alone
            assert await _value(scheduler, _request(sequence, sequence, SEQUENCE_START)) == sequence

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    assert instance.seen() == [[1], [2], [3]]  # the instance gets the real requests only
    stats = statistics.to_json("m", "1")
    assert (stats["execution_count"], stats["inference_count"]) == (3, 3)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
        (1, 1),
        (2, 1),
        (3, 1),
    ]


def test_a_backlogged_sequence_is_refused_once_its_earliest_request_timeout_passes() -> None:
    """Triton's rule: request timeouts apply to sequences in the backlog only. Once one passes, every
    request of that sequence is refused and the sequence is forgotten (a later request must START)."""
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(1, "direct { }"), [instance])  # one slot

    def timed(sequence: int, value: int, flags: int, timeout_us: int) -> BackendRequest:
        request = _request(sequence, value, flags)
        request.timeout_us = timeout_us
        return request

    async def run() -> None:
        assert await _value(scheduler, timed(1, 1, SEQUENCE_START, 1)) == 1  # seated: no timeout applies
        backlogged = [
            asyncio.create_task(_value(scheduler, timed(2, 2, SEQUENCE_START, 0))),  # no timeout of its own
            asyncio.create_task(_value(scheduler, timed(2, 3, 0, 20_000))),  # 20 ms: the sequence's expiry
        ]
        for task in backlogged:
            with pytest.raises(Unavailable, match="timeout of the corresponding sequence has been expired"):
                await task
        assert scheduler.active_sequences() == 1  # only sequence 1, still seated
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await scheduler.execute(_request(2, 4, SEQUENCE_END))
        assert await _value(scheduler, timed(1, 5, SEQUENCE_END, 1)) == 5

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    assert instance.seen() == [[1], [1]]


def _shaped(sequence: int, width: int, flags: int) -> BackendRequest:
    return BackendRequest(
        {"INPUT": np.full((1, width), sequence, dtype=np.int32)},
        ("OUTPUT",),
        correlation_id=sequence,
        flags=flags,
    )


@pytest.mark.parametrize("ragged", [False, True])
def test_direct_batches_leave_out_slots_whose_shapes_differ_from_the_lowest_slot(
    monkeypatch: pytest.MonkeyPatch, ragged: bool
) -> None:
    """Sequences 1 and 2 send [1, 2] tensors, 3 sends [1, 1] and 4 [1, 3]. Without ragged batching each batch
    takes the slots whose shapes match the lowest ready slot's; the others wait, and their rows still count
    in Triton's batch size (null requests up to the highest ready slot)."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "8")  # all requests queued before the first batch
    config = _config(4, "direct { }")
    config.input.add(name="INPUT", data_type=mc.TYPE_INT32, dims=[-1], allow_ragged_batch=ragged)
    instance = Instance()
    statistics = ModelStatistics()
    scheduler = SequenceBatcher("m", config, [instance], statistics=statistics)
    widths = {1: 2, 2: 2, 3: 1, 4: 3}

    async def run() -> list[int]:
        tasks = []
        for sequence in widths:  # slots 0 to 3 in this order; both requests queued at once
            for flags in (SEQUENCE_START, SEQUENCE_END):
                request = _shaped(sequence, widths[sequence], flags)
                tasks.append(asyncio.create_task(scheduler.execute(request)))
                await asyncio.sleep(0)
        return [int(outputs["OUTPUT"][0, 0]) for outputs in await asyncio.gather(*tasks)]

    try:
        results = asyncio.run(run())
    finally:
        scheduler.stop()
    assert results == [1, 1, 2, 2, 3, 3, 4, 4]
    stats = statistics.to_json("m", "1")
    if ragged:
        assert instance.seen() == [[1, 2, 3, 4], [1, 2, 3, 4]]
        assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [(4, 2)]
    else:
        assert instance.seen() == [[1, 2], [1, 2], [3], [3], [4], [4]]
        assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [(4, 6)]
    assert stats["inference_count"] == 8


def test_a_stopping_server_refuses_new_sequences_and_lets_started_ones_end() -> None:
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(2, "direct { }" + STATE), [instance])

    async def run() -> None:
        assert await _value(scheduler, _request(1, 10, SEQUENCE_START)) == 10
        assert await _value(scheduler, _request(2, 20, SEQUENCE_START)) == 20
        assert scheduler.waiting_sequences() == 2  # started, each waiting for its next request
        scheduler.refuse_new_sequences()
        with pytest.raises(Unavailable, match="the server is stopping"):
            await scheduler.execute(_request(3, 30, SEQUENCE_START))  # a new correlation id
        with pytest.raises(Unavailable, match="the server is stopping"):
            await scheduler.execute(_request(2, 5, SEQUENCE_START))  # a restart would begin a new sequence
        assert await _value(scheduler, _request(1, 1)) == 11  # started before: it goes on, with its state
        assert await _value(scheduler, _request(1, 1, SEQUENCE_END)) == 12
        assert scheduler.waiting_sequences() == 1  # sequence 2 has not ended
        assert await _value(scheduler, _request(2, 2, SEQUENCE_END)) == 22
        assert scheduler.waiting_sequences() == 0

    try:
        asyncio.run(run())
    finally:
        scheduler.stop()
    assert [c for call in instance.seen() for c in call].count(3) == 0


def test_a_sequence_with_a_request_in_flight_is_not_counted_as_waiting() -> None:
    gate = threading.Event()
    scheduler = SequenceBatcher("m", _config(1, "direct { }"), [Instance(gate)])

    async def run() -> None:
        running = asyncio.create_task(_value(scheduler, _request(1, 10, SEQUENCE_START)))
        await _until(lambda: scheduler.active_sequences() == 1 and scheduler.pending() == 0)
        assert scheduler.waiting_sequences() == 0  # its request is counted by the model, not here
        gate.set()
        assert await running == 10
        assert scheduler.waiting_sequences() == 1

    try:
        asyncio.run(run())
    finally:
        gate.set()
        scheduler.stop()


def test_a_stopped_batcher_refuses_requests_as_its_model_unloads() -> None:
    instance = Instance()
    scheduler = SequenceBatcher("m", _config(2, ""), [instance])
    scheduler.stop()

    async def run() -> None:
        with pytest.raises(Unavailable, match="^model m is unloading$"):
            await scheduler.execute(_request(1, 1, SEQUENCE_START))

    asyncio.run(run())
    assert instance.calls == [] and instance.closed
