"""What it costs this machine to wake a sleeping process: the hand-off every Python-backend execution
and every ensemble step pays twice (server to worker, worker back to server).

A parent sends 100 bytes over a Unix socket pair to a child that sleeps in recv; the child spins for
--work-us microseconds (its "execute") and answers; the parent sleeps in recv for the answer. Each
message follows a pause, so both sides are asleep when it comes, as at low concurrency. Measured four
ways: both processes left to the scheduler; each pinned to its own CPU (the worker runs in parallel,
but every wake-up crosses CPUs); the parent polling for the answer instead of sleeping; and, in place
of the socket, a shared mapping with a POSIX semaphore each way (how Triton's stub hands messages over).
The overhead column is the round trip minus the child's work: what the two wake-ups cost; the child's
CPU per message (from /proc, in clock ticks) is its work plus what its sleep, wake-up and answer cost it.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from cpu import tree_cpu_seconds

HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _timed(child: int, count: int, exchange: Callable[[], None]) -> tuple[list[float], float]:
    """`count` exchanges with the child, each after a pause: their times, and the child's CPU per message."""
    times = []
    cpu = tree_cpu_seconds(child)
    for _ in range(count):
        time.sleep(0.002)  # both sides fall asleep
        started = time.perf_counter()
        exchange()
        times.append(time.perf_counter() - started)
    return times, (tree_cpu_seconds(child) - cpu) / count


def round_trips(work_s: float, count: int, pin: bool, parent_polls: bool) -> tuple[list[float], float]:
    """The round trips' times, and the child's CPU per message."""
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

    def exchange() -> None:
        parent.send(b"y" * 100)
        while True:
            try:
                parent.recv(8)
                return
            except BlockingIOError:
                continue

    try:
        return _timed(pid, count, exchange)
    finally:
        parent.close()
        os.waitpid(pid, 0)
        if pin:
            os.sched_setaffinity(0, set(cpus))


def semaphore_round_trips(work_s: float, count: int) -> tuple[list[float], float]:
    """`round_trips` left to the scheduler, with the message in a shared mapping and a POSIX semaphore
    each way in place of the socket."""
    to_child, to_parent = multiprocessing.Semaphore(0), multiprocessing.Semaphore(0)
    with mmap.mmap(-1, 4096) as shared:
        shared[0] = 1
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker, until told to stop or orphaned (a semaphore, unlike a socket, never ends)
            try:
                while shared[0] and os.getppid() == parent:
                    if to_child.acquire(timeout=1.0) and shared[0]:
                        shared[200:300] = shared[100:200]
                        _spin(work_s)
                        to_parent.release()
            finally:
                os._exit(0)

        def exchange() -> None:
            shared[100:200] = b"y" * 100
            to_child.release()
            to_parent.acquire()

        try:
            return _timed(pid, count, exchange)
        finally:
            shared[0] = 0
            to_child.release()
            os.waitpid(pid, 0)


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
    print(
        f"  {'work us':>7}  {'case':<26} {'p50 us':>7} {'p90 us':>7} {'mean us':>8} {'overhead p50':>13}"
        f" {'child cpu us':>13}"
    )
    cases = [  # name, pinned, parent polls, semaphores in place of the socket
        ("scheduler places both", False, False, False),
        ("pinned to separate CPUs", True, False, False),
        ("parent polls", False, True, False),
        ("semaphores, shared memory", False, False, True),
    ]
    for work_us in (float(w) for w in args.work_us.split(",")):
        for name, pin, polls, semaphores in cases:
            if pin and len(os.sched_getaffinity(0)) < 2:
                continue
            if semaphores:
                times, cpu = semaphore_round_trips(work_us / 1e6, args.count)
            else:
                times, cpu = round_trips(work_us / 1e6, args.count, pin, polls)
            times.sort()
            p50, p90 = times[len(times) // 2] * 1e6, times[int(len(times) * 0.9)] * 1e6
            print(
                f"  {work_us:>7.0f}  {name:<26} {p50:>7.0f} {p90:>7.0f} {statistics.mean(times) * 1e6:>8.0f}"
                f" {p50 - work_us:>13.0f} {cpu * 1e6:>13.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
