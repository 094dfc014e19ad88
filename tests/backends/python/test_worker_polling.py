"""When a worker polls for its next frame: only after an execution the server sent with nothing ahead of
it (a server with requests queued keeps the worker fed and is busy itself), and only while frames have
been coming soon enough for it to pay."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import python as python_backend
from nereid.backends.python.instance import PythonInstance
from nereid.backends.python.worker import wire
from nereid.backends.python.worker.stub import Worker
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.backends.python.conftest import copy_models, infer
from tests.conftest import ROOT, child_processes, start_nereid, stop


@pytest.fixture
def worker() -> Iterator[tuple[Worker, socket.socket, list[float]]]:
    ours, theirs = socket.socketpair()
    worker = Worker(theirs)
    worker._busy_wait_s = 0.0005
    polls: list[float] = []
    worker._poll = polls.append  # type: ignore[method-assign]
    yield worker, ours, polls
    ours.close()
    theirs.close()


@pytest.mark.parametrize(
    ("poll_after", "gap_s", "polled"), [(True, 0.0, True), (False, 0.0, False), (True, 1.0, False)]
)
def test_the_worker_polls_only_after_an_execution_sent_alone_and_while_frames_come_soon(
    worker: tuple[Worker, socket.socket, list[float]], poll_after: bool, gap_s: float, polled: bool
) -> None:
    stub, server, polls = worker
    stub._poll_after = poll_after
    stub._gap_s = gap_s
    wire.send(server, wire.encode((wire.IS_READY, 1)))
    assert stub._next() == (wire.IS_READY, 1)
    assert polls == ([0.0005] if polled else [])


class _NoRequests:
    def execute(self, requests: list[object]) -> list[object]:
        return []


def test_an_execute_frame_says_whether_to_poll_after_it(
    worker: tuple[Worker, socket.socket, list[float]],
) -> None:
    stub, server, _ = worker
    stub._model = _NoRequests()
    stub._arena_size = 1 << 16
    reader = wire.FrameReader()
    for seq, alone in enumerate((True, False, True)):
        stub._execute((wire.EXECUTE, seq, 0, 0, (), alone))
        ((kind, answered, slot, _, results),) = wire.receive(server, reader)  # type: ignore[misc]
        assert (kind, answered, slot, results) == (wire.RESULT, seq, 0, ())
        assert stub._poll_after is alone


def _voluntary_switches(pid: int) -> int:
    """How many times the process's main thread went to sleep so far."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_worker_that_sleeps_between_executions_sleeps_once_each(tmp_path: Path) -> None:
    # One request at a time with polling off: the worker sleeps for each EXECUTE. Asleep in a blocking
    # recvmsg, it was also woken when the server read its RESULT (the kernel's write-space wake-up of a Unix
    # socket's waiters), and slept again: two sleeps an execution where one is enough.
    running = start_nereid(
        ROOT / "examples" / "python_model_repository",
        tmp_path / "server.log",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--backend-config=python,busy-wait-microseconds=0",
    )
    try:
        (worker,) = child_processes(running.process.pid)
        body = json.dumps(
            {
                "inputs": [
                    {"name": name, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                    for name in ("INPUT0", "INPUT1")
                ]
            }
        )
        connection = http.client.HTTPConnection("127.0.0.1", running.http_port, timeout=30)
        try:

            def infer() -> None:
                connection.request("POST", "/v2/models/add_sub/infer", body)
                response = connection.getresponse()
                assert response.status == 200, response.read()
                response.read()

            infer()  # the worker's first execution sets up what later ones reuse
            before = _voluntary_switches(worker)
            count = 200
            for _ in range(count):
                infer()
            slept = _voluntary_switches(worker) - before
        finally:
            connection.close()
    finally:
        stop(running.process)
    # About one sleep each, not two. A few fewer is no fault: a worker preempted between sending its
    # result and its next read finds the next EXECUTE already there and need not sleep for it.
    assert 0.9 * count <= slept < 1.5 * count, f"{slept} sleeps for {count} executions"


@pytest.mark.parametrize(
    ("host_polls", "backend_config", "busy_wait_us"),
    [
        (False, {}, 500),
        (True, {}, 0),
        (True, {"busy-wait-microseconds": "300"}, 300),
        (False, {"busy-wait-microseconds": "0"}, 0),
    ],
)
def test_workers_poll_by_default_only_where_idle_cpus_halt_at_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host_polls: bool,
    backend_config: dict[str, str],
    busy_wait_us: int,
) -> None:
    monkeypatch.setattr(python_backend, "idle_cpus_poll_before_halting", lambda: host_polls)
    launch = python_backend._launch(mc.ModelConfig(name="m", backend="python"), tmp_path, backend_config)
    assert launch.busy_wait_us == busy_wait_us


@pytest.mark.parametrize(("busy_wait_us", "keeps_turning"), [("500", True), ("0", False)])
def test_the_event_loop_keeps_turning_for_a_lone_execution_only_while_polling_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy_wait_us: str, keeps_turning: bool
) -> None:
    # README: the loop keeps turning (up to 250 us) while a lone execution is in flight, and
    # busy-wait-microseconds=0 gives the CPU back on both sides. A model with no round trip measured yet
    # always qualifies, so with polling on the first execution keeps the loop awake.
    turns: list[object] = []
    keep_awake = PythonInstance._keep_awake

    def counted(self: PythonInstance, execution: Any) -> None:
        turns.append(execution)
        keep_awake(self, execution)

    monkeypatch.setattr(PythonInstance, "_keep_awake", counted)
    repository = copy_models(tmp_path, "add_sub")
    config = {"python": {"stub-timeout-seconds": "5", "busy-wait-microseconds": busy_wait_us}}
    manager = ModelManager(ServerSettings(model_repositories=(repository,), backend_config=config))
    manager.start()
    try:
        inputs = {name: np.ones((1, 16), np.float32) for name in ("INPUT0", "INPUT1")}
        for _ in range(20):  # one at a time: each execution is alone in flight
            outputs = infer(manager, "add_sub", inputs)
            assert np.array_equal(outputs["OUTPUT0"], 2 * inputs["INPUT0"])
    finally:
        manager.stop()
    assert bool(turns) == keeps_turning, f"{len(turns)} turns kept with busy-wait {busy_wait_us}"
