"""The server's threads under SCHED_BATCH (nereid/host.py, --cpu-scheduling).

A scheduling policy belongs to a thread and is inherited, so the module's own cases run in a fresh
interpreter, and the server's are read from /proc while it serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nereid import host
from tests.conftest import ROOT, child_processes, start_nereid, stop

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")

_CASES = r"""
import os, subprocess, sys, threading
from nereid.host import batch_scheduling

def policy_of_a_new_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
    thread.start()
    thread.join()
    return seen[0]

release = threading.Event()
tids = {}

def early(name, policy):
    tids[name] = threading.get_native_id()
    if policy is not None:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    tids[name + " ready"] = True
    release.wait()

threads = [threading.Thread(target=early, args=("plain", None)), threading.Thread(target=early, args=("idle", os.SCHED_IDLE))]
for thread in threads:
    thread.start()
while len(tids) < 4:
    pass
assert policy_of_a_new_thread() == os.SCHED_OTHER
assert batch_scheduling() is None
assert os.sched_getscheduler(0) == os.SCHED_BATCH
assert os.sched_getscheduler(tids["plain"]) == os.SCHED_BATCH  # started before: changed too
assert os.sched_getscheduler(tids["idle"]) == os.SCHED_IDLE  # an operator's choice: left alone
assert policy_of_a_new_thread() == os.SCHED_BATCH
child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"], capture_output=True, text=True)
assert int(child.stdout) == os.SCHED_BATCH, child
release.set()
print("ok")
"""


def test_every_thread_and_what_starts_later_get_sched_batch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CASES], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_sandbox_that_refuses_the_policy_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_getscheduler", lambda _: os.SCHED_OTHER)
    monkeypatch.setattr(os, "sched_setscheduler", refused)
    assert host.batch_scheduling() == "Operation not permitted"


_REFUSED = r"""
import os, sys

def refused(*_):
    raise PermissionError(1, "Operation not permitted")

os.sched_setscheduler = refused  # as a sandbox's seccomp profile would answer
from nereid.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_server_whose_sandbox_refuses_the_policy_says_so_and_goes_on(tmp_path: Path) -> None:
    # No endpoint: the server exits right after loading, past the point where it set the policy.
    flags = ["--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"]
    result = subprocess.run(
        [sys.executable, "-c", _REFUSED, f"--model-repository={tmp_path}", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    log = result.stdout + result.stderr
    assert "--cpu-scheduling=batch: left as it was (Operation not permitted)" in log, log
    assert "--allow-http=false and --allow-grpc=false leave no endpoint" in log, log


def _policies(pid: int) -> dict[str, int]:
    """The policy of every thread of a process and of its child processes, by 'pid/tid'."""
    found = {}
    for process in [pid, *child_processes(pid)]:
        for tid in os.listdir(f"/proc/{process}/task"):
            try:
                found[f"{process}/{tid}"] = os.sched_getscheduler(int(tid))
            except ProcessLookupError:
                continue
    return found


@pytest.mark.parametrize(
    ("flags", "policy"),
    # getattr: the module is collected (and skipped) where the policy does not exist
    [((), getattr(os, "SCHED_BATCH", -1)), (("--cpu-scheduling=normal",), os.SCHED_OTHER)],
    ids=["default", "normal"],
)
def test_the_server_its_threads_and_workers_run_under_the_policy_asked_for(
    tmp_path: Path, flags: tuple[str, ...], policy: int
) -> None:
    running = start_nereid(
        ROOT / "examples" / "python_model_repository",
        tmp_path / "server.log",
        "--model-control-mode=explicit",
        "--load-model=add_sub",  # a worker process
        *flags,
        grpc=True,
    )
    try:
        policies = _policies(running.process.pid)
        workers = {key.split("/")[0] for key in policies} - {str(running.process.pid)}
        assert workers, "add_sub runs in a worker process"
        assert len(policies) > 3 and set(policies.values()) == {policy}, policies
    finally:
        stop(running.process)
    assert "--cpu-scheduling" not in running.log()  # no warning


@pytest.mark.parametrize(
    ("driver", "governor", "poll_ns", "polls"),
    [
        ("haltpoll\n", "haltpoll\n", "200000\n", True),  # a guest whose idle CPUs poll 200 us before halting
        ("haltpoll\n", "haltpoll\n", "0\n", False),  # a guest whose idle CPUs halt at once
        ("intel_idle\n", "menu\n", "200000\n", False),  # the governor's parameter, with another driver
        ("haltpoll\n", "menu\n", "200000\n", False),  # another governor: the parameter is not used
        ("acpi_idle\n", "haltpoll\n", "200000\n", False),  # only the driver and governor pair measured
        ("haltpoll\n", "haltpoll\n", None, False),
        (None, None, None, False),  # no cpuidle to read
        ("haltpoll\n", "haltpoll\n", "soon\n", False),
    ],
)
def test_idle_cpus_poll_only_under_haltpoll_with_a_poll_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    driver: str | None,
    governor: str | None,
    poll_ns: str | None,
    polls: bool,
) -> None:
    files = (("CPUIDLE_DRIVER", driver), ("CPUIDLE_GOVERNOR", governor), ("GUEST_HALT_POLL_NS", poll_ns))
    for name, text in files:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(host, name, path)
    host.idle_cpus_poll_before_halting.cache_clear()
    try:
        assert host.idle_cpus_poll_before_halting() is polls
    finally:
        host.idle_cpus_poll_before_halting.cache_clear()
