"""CPU time a server spends per request: all its processes (the server and its children, such as Python
backend workers or stubs), from /proc/<pid>/stat, over a measurement, divided by the requests it completed
meanwhile (the model's success count in its statistics), and the part of it in the Python backend's model
processes (Nereid's workers, Triton's stubs; the rest is the server's). Beside it, the load generator's: the CPU of the
child processes that ended within the measurement (perf_analyzer, run to its end inside it) per request,
since a server's protocol choices (how many writes and packets a response takes) cost the client too.
"""

from __future__ import annotations

import json
import os
import resource
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:  # gone meanwhile
        return None
    return text[text.rindex(")") + 2 :].split()  # the fields after the command name, from field 3 on


def tree_pids(*roots: int) -> set[int]:
    """`roots` and every process descending from them, now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    tree = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def _cpu_seconds(fields: list[str] | None) -> float:
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


def tree_cpu_seconds(*roots: int) -> float:
    """utime + stime of `roots` and of every process descending from them, now."""
    return sum(_cpu_seconds(_stat(pid)) for pid in tree_pids(*roots))


# What the Python backend's model processes run: Nereid's workers, Triton's stubs.
_WORKER_MARKS = (b"backends/python/worker/__main__.py", b"triton_python_backend_stub")


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except OSError:
        return False
    return any(mark in command for mark in _WORKER_MARKS)


def worker_cpu_seconds(*roots: int) -> float:
    """utime + stime of the Python backend's model processes (workers, stubs) in the tree, now."""
    return sum(_cpu_seconds(_stat(pid)) for pid in tree_pids(*roots) if _is_worker(pid))


def thread_cpu_seconds(*roots: int) -> dict[tuple[int, int], float]:
    """(pid, thread id) -> utime + stime of each thread of the process tree, now."""
    threads = {}
    for pid in tree_pids(*roots):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            threads[(pid, int(tid))] = _cpu_seconds(text[text.rindex(")") + 2 :].split())
    return threads


def tree_peak_rss_mib(*roots: int) -> float:
    """The sum of VmHWM (each process's peak resident memory) over the process tree, in MiB."""
    total_kib = 0
    for pid in tree_pids(*roots):
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


def completed_requests(http_port: int, model: str) -> int:
    """Requests the model answered successfully so far, from the server's statistics."""
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.load(response)["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


@dataclass
class CpuPerRequest:
    microseconds: float = 0.0
    worker_microseconds: float = 0.0  # the part spent in the Python backend's workers or stubs
    client_microseconds: float = 0.0  # of the children that ended meanwhile (the load generator)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def cpu_per_request(pid: int, requests: Callable[[], int]) -> Iterator[CpuPerRequest]:
    """Measure around a block: CPU microseconds of the process tree per request completed within it."""
    result = CpuPerRequest()
    before_cpu, before_requests = tree_cpu_seconds(pid), requests()
    before_workers, before_client = worker_cpu_seconds(pid), _children_cpu_seconds()
    yield result
    done = requests() - before_requests
    result.microseconds = (tree_cpu_seconds(pid) - before_cpu) * 1e6 / max(1, done)
    result.worker_microseconds = (worker_cpu_seconds(pid) - before_workers) * 1e6 / max(1, done)
    result.client_microseconds = (_children_cpu_seconds() - before_client) * 1e6 / max(1, done)
