"""What it costs this machine to wake a sleeping process: the hand-off every Python-backend execution
and every ensemble step pays twice (server to worker, worker back to server).

A parent sends 100 bytes over a Unix socket pair to a child that sleeps in recv; the child spins for
--work-us microseconds (its "execute") and answers; the parent sleeps in recv for the answer. Each
message follows a pause, so both sides are asleep when it comes, as at low concurrency. Measured three
ways: both processes left to the scheduler; each pinned to its own CPU (the worker runs in parallel,
but every wake-up crosses CPUs); and the parent polling for the answer instead of sleeping. The
overhead column is the round trip minus the child's work: what the two wake-ups cost.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from pathlib import Path

HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def round_trips(work_s: float, count: int, pin: bool, parent_polls: bool) -> list[float]:
    parent, child = socket.socketpair()
    cpus = sorted(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # the worker
        parent.close()
        if pin:
            os.sched_setaffinity(0, {cpus[-1]})
        while child.recv(128):
            _spin(work_s)
            child.send(b"x")
        os._exit(0)
    child.close()
    if pin:
        os.sched_setaffinity(0, {cpus[0]})
    if parent_polls:
        parent.setblocking(False)
    times = []
    try:
        for _ in range(count):
            time.sleep(0.002)  # both sides fall asleep
            started = time.perf_counter()
            parent.send(b"y" * 100)
            while True:
                try:
                    parent.recv(8)
                    break
                except BlockingIOError:
                    continue
            times.append(time.perf_counter() - started)
    finally:
        parent.close()
        os.waitpid(pid, 0)
        if pin:
            os.sched_setaffinity(0, set(cpus))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--work-us", default="100,1000", help="comma-separated child work per message")
    parser.add_argument("--count", type=int, default=1000, help="messages per measurement")
    args = parser.parse_args()
    if HALT_POLL.exists():
        print(f"guest halt polling: {HALT_POLL.read_text().strip()} ns (0: idle virtual CPUs halt at once)")
    print(f"CPUs: {len(os.sched_getaffinity(0))}")
    if len(os.sched_getaffinity(0)) < 2:
        print("one CPU: the pinned case is left out")
    print(f"  {'work us':>7}  {'case':<26} {'p50 us':>7} {'p90 us':>7} {'mean us':>8} {'overhead p50':>13}")
    cases = [
        ("scheduler places both", False, False),
        ("pinned to separate CPUs", True, False),
        ("parent polls", False, True),
    ]
    for work_us in (float(w) for w in args.work_us.split(",")):
        for name, pin, polls in cases:
            if pin and len(os.sched_getaffinity(0)) < 2:
                continue
            times = sorted(round_trips(work_us / 1e6, args.count, pin, polls))
            p50, p90 = times[len(times) // 2] * 1e6, times[int(len(times) * 0.9)] * 1e6
            print(
                f"  {work_us:>7.0f}  {name:<26} {p50:>7.0f} {p90:>7.0f} {statistics.mean(times) * 1e6:>8.0f}"
                f" {p50 - work_us:>13.0f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
