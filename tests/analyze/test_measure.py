"""The stable-window rule, windows that grow for slow models, and perf_analyzer's CSV read back."""

from __future__ import annotations

from nereid.analyze.loadgen import Record
from nereid.analyze.measure import (
    ServerUsage,
    Window,
    WindowRules,
    _Windows,
    parse_perf_analyzer_csv,
    perf_analyzer_command,
    stable,
)

RULES = WindowRules(window_s=1.0, count=3, tolerance=0.1, max_windows=10)


def test_three_windows_within_ten_percent_are_stable():
    same = [Window(1.0, (0.010,) * 100) for _ in range(3)]
    assert stable(same, RULES)
    assert not stable(same[:2], RULES)
    assert not stable([*same[:2], Window(1.0, (0.010,) * 80)], RULES)  # throughput 20% off
    assert not stable([*same[:2], Window(1.0, (0.015,) * 100)], RULES)  # average latency 50% off
    assert not stable([Window(1.0, ()) for _ in range(3)], RULES)  # nothing completed
    # two slow requests (a preemption) put a window's p99 at 50 ms, its average 7% up: still stable
    spike = Window(1.0, (0.0099,) * 98 + (0.05, 0.05))
    assert stable([*same[:2], spike], RULES)


def test_windows_grow_until_each_completes_enough_requests():
    usage = ServerUsage(1.0, 100.0, 0)
    ticks = iter([0.0, 0.5, 0.5, 1.5, 1.5, *(3.5 + 2 * i for i in range(3) for _ in range(2))])
    cutter, record = _Windows(RULES, lambda: usage, clock=lambda: next(ticks)), Record()
    assert cutter(record) == 0.5  # warm-up
    assert cutter(record) == 1.0  # the first window starts
    record.done.extend((0.0, 0.9) for _ in range(2))  # a slow model: 2 requests in the window
    assert cutter(record) == 2.0 and cutter.windows == []
    for _ in range(3):
        record.done.extend((0.0, 0.15) for _ in range(12))
        wait = cutter(record)
    assert wait is None and len(cutter.windows) == 3 and cutter.after == usage


def test_past_the_time_budget_the_windows_so_far_make_the_measurement():
    usage = ServerUsage(1.0, 100.0, 0)
    ticks = iter([0.0, 0.5, 0.5, 1.5])
    cutter = _Windows(RULES, lambda: usage, clock=lambda: next(ticks), deadline=0.0)
    record = Record()
    assert cutter(record) == 0.5 and cutter(record) == 1.0
    record.done.extend((0.0, 0.05) for _ in range(20))
    assert cutter(record) is None and len(cutter.windows) == 1
    assert not stable(cutter.windows, RULES)


def test_perf_analyzer_is_asked_for_the_same_rule_and_its_csv_is_read():
    command = perf_analyzer_command("pa", "127.0.0.1:8000", "http", "add_sub", 4, RULES, "zero")
    assert command[command.index("--concurrency-range") + 1] == "4"
    assert command[command.index("--measurement-interval") + 1] == "1000"
    assert command[command.index("--stability-percentage") + 1] == "10"
    row = parse_perf_analyzer_csv(
        "Concurrency,Inferences/Second,Client Send,p50 latency,p90 latency,p95 latency,p99 latency\n"
        "4,1234.5,10,3000,3500,3900,4200\n"
    )
    assert row["Inferences/Second"] == 1234.5 and row["p99 latency"] == 4200
