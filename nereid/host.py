"""What the host gives this process."""

from __future__ import annotations

import functools
import os
from pathlib import Path

# KVM guests that poll before halting run the cpuidle-haltpoll driver with the haltpoll governor, whose
# guest_halt_poll_ns is the longest each idle CPU polls (it adapts its poll up to that; 0: it never polls).
CPUIDLE_DRIVER = Path("/sys/devices/system/cpu/cpuidle/current_driver")
CPUIDLE_GOVERNOR = Path("/sys/devices/system/cpu/cpuidle/current_governor_ro")
GUEST_HALT_POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform has one, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def batch_scheduling() -> str | None:
    """Put this process's threads under Linux's SCHED_BATCH policy; threads and processes it starts later
    inherit it. Returns why the system refused, or None (also where there is no such policy: not Linux).

    A thread of the server wakes another many times per batch of requests: the event loop an instance's
    thread, that thread the loop, the loop the gRPC core's thread with each response. Under the default
    policy a woken thread may take the waker's CPU at once, so each hand-off costs two context switches
    and often a wait for the GIL the waker still holds. A SCHED_BATCH thread that wakes waits for the
    waker to block or for the next tick instead: the same work with fewer switches. On a saturated host
    that shows most over gRPC, whose core's thread the loop wakes with every response (bench/README.md).
    Threads under another policy (SCHED_IDLE, real-time: an operator's choice) are left alone."""
    if not hasattr(os, "SCHED_BATCH") or not os.path.isdir("/proc/self/task"):
        return None
    for tid in os.listdir("/proc/self/task"):  # threads that libraries started at import
        try:
            if os.sched_getscheduler(int(tid)) == os.SCHED_OTHER:
                os.sched_setscheduler(int(tid), os.SCHED_BATCH, os.sched_param(0))
        except ProcessLookupError:  # that thread ended meanwhile
            continue
        except OSError as exc:  # a sandbox that forbids it (seccomp)
            return os.strerror(exc.errno) if exc.errno else str(exc)
    return None


@functools.cache
def idle_cpus_poll_before_halting() -> bool:
    """Whether this host's idle CPUs poll a while before they halt: a virtual machine under the haltpoll
    idle driver and governor, with a poll time above 0. False where it cannot tell. Read once: a server
    keeps what it found at start.

    On a virtual machine whose idle CPUs halt at once, waking a process that sleeps costs the woken one
    about 50 us of CPU when it lands on the other, halted CPU (bench/wakeup_latency.py), which is what the
    Python backend's polling (the worker's and the event loop's) avoids. Where the kernel polls for it,
    the woken process finds its CPU awake, and polling only adds CPU: at concurrency 1 a worker that
    sleeps spent 26 us a request against 86 polling, at the same rate (bench/README.md)."""
    try:
        driver = CPUIDLE_DRIVER.read_text().strip()
        governor = CPUIDLE_GOVERNOR.read_text().strip()
        poll_ns = int(GUEST_HALT_POLL_NS.read_text())
    except (OSError, ValueError):
        return False
    return driver == governor == "haltpoll" and poll_ns > 0
