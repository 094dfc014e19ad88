from __future__ import annotations

import math

from nereid.scheduling.sequence_policy import DirectPolicy, SlotId, SlotTable, decide_direct, idle_expired


def test_new_sequences_spread_over_instances_lowest_slot_first() -> None:
    table: SlotTable[str] = SlotTable(instances=2, slots_per_instance=3)
    assert [table.start(k) for k in "abcd"] == [SlotId(0, 0), SlotId(0, 1), SlotId(1, 0), SlotId(1, 1)]
    assert table.holder(SlotId(1, 0)) == "c"
    assert table.free_slots() == 2


def test_backlog_takes_freed_slots_oldest_first() -> None:
    table: SlotTable[str] = SlotTable(instances=1, slots_per_instance=2)
    assert table.start("a") == SlotId(0, 0)
    assert table.start("b") == SlotId(1, 0)
    assert table.start("c") is None
    assert table.start("d") is None
    assert table.backlog() == ["c", "d"]
    assert table.release(SlotId(1, 0)) == "c"  # the freed slot goes straight to the oldest waiting
    assert table.holder(SlotId(1, 0)) == "c"
    assert table.backlog() == ["d"]
    assert table.release(SlotId(0, 0)) == "d"
    assert table.release(SlotId(0, 0)) is None
    assert table.free_slots() == 1
    assert table.start("e") == SlotId(0, 0)  # a freed slot is reused, lowest first


def test_direct_without_delay_runs_whatever_is_ready() -> None:
    policy = DirectPolicy(slots=4)
    assert decide_direct([1.0], now=1.0, policy=policy) is None
    assert decide_direct([], now=1.0, policy=policy) == math.inf


def test_direct_delay_without_a_minimum_utilization_does_not_wait() -> None:
    """Triton's direct strategy waits only when both the queue delay and the minimum are set."""
    policy = DirectPolicy(slots=4, max_queue_delay_s=0.5)
    assert decide_direct([1.0], now=1.0, policy=policy) is None


def test_direct_minimum_slot_utilization() -> None:
    policy = DirectPolicy(slots=4, max_queue_delay_s=1.0, minimum_slot_utilization=0.5)
    assert decide_direct([2.0], now=2.0, policy=policy) == 3.0
    assert decide_direct([2.0, 2.1], now=2.1, policy=policy) is None  # 2 of 4 slots
    assert decide_direct([2.0], now=3.0, policy=policy) is None  # delay over
    full = DirectPolicy(slots=4, max_queue_delay_s=1.0, minimum_slot_utilization=1.0)
    assert decide_direct([2.0, 2.1, 2.2], now=2.2, policy=full) == 3.0


def test_idle_sequences_expire_and_the_next_expiry_is_reported() -> None:
    expired, next_at = idle_expired({"a": 0.0, "b": 0.7, "c": 0.2}, now=1.0, idle_s=1.0)
    assert expired == ["a"]
    assert next_at == 1.2
    assert idle_expired({}, now=1.0, idle_s=1.0) == ([], None)
