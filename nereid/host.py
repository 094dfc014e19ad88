"""What the host gives this process."""

from __future__ import annotations

import os


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
