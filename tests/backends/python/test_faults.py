"""Faults stay contained: exceptions fail their requests, dead or hung workers are noticed and replaced."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path

import pytest

from nereid.backends.base import Outputs
from nereid.errors import InternalError, InvalidArgument, Unavailable
from nereid.repository import ModelManager
from tests.backends.python.conftest import command, copy_models, infer, manager_for, request, wait_until


def _pid(manager: ModelManager) -> int:
    return int(infer(manager, "faulty", command("ok"))["OUTPUT0"][1])


def test_an_exception_fails_the_requests_with_tritons_text_and_logs_the_traceback(
    manager: ModelManager, caplog: pytest.LogCaptureFixture
) -> None:
    pid = _pid(manager)
    with caplog.at_level(logging.ERROR), pytest.raises(InternalError) as raised:
        infer(manager, "faulty", command("raise"))
    message = raised.value.message
    assert re.fullmatch(
        r"Failed to process the request\(s\) for model 'faulty_0', message: ValueError: the model raised\n\n"
        r"At:\n  \S+/faulty/1/model.py\(\d+\): execute\n",
        message,
    ), message
    assert message in caplog.text
    assert _pid(manager) == pid  # the same worker goes on


def test_sys_exit_in_execute_is_an_exception_as_in_triton(manager: ModelManager) -> None:
    pid = _pid(manager)
    with pytest.raises(InternalError, match=r"model 'faulty_0', message: SystemExit: 3\n\nAt:\n"):
        infer(manager, "faulty", command("exit"))
    assert _pid(manager) == pid


def test_an_error_response_fails_that_request_with_its_status(manager: ModelManager) -> None:
    with pytest.raises(InvalidArgument, match="^the model refused this request$"):
        infer(manager, "faulty", command("error"))


@pytest.mark.parametrize(
    ("what", "cause"),
    [
        ("segfault", "its worker process was killed by SIGSEGV"),
        ("os_exit", "its worker process exited with code 7"),
        ("hang", r"its worker process did not finish an execution within the execute timeout \(1 s\)"),
    ],
)
def test_a_dead_or_hung_worker_fails_its_requests_and_is_restarted(
    manager: ModelManager, what: str, cause: str
) -> None:
    pid = _pid(manager)
    with pytest.raises(InternalError, match=rf"^Stub process 'faulty_0' is not healthy: {cause}$"):
        infer(manager, "faulty", command(what))
    # Starting a worker takes a new Python process, so the instance is still down when the error arrives.
    assert not manager.is_ready("faulty")
    (row,) = [r for r in manager.index() if r["name"] == "faulty"]
    assert row["state"] == "UNAVAILABLE" and re.search(cause, row["reason"]), row
    assert "restarting" in row["reason"]
    wait_until(lambda: manager.is_ready("faulty"), what="the restarted worker")
    assert _pid(manager) != pid


def test_requests_sent_while_a_worker_restarts_wait_for_it(manager: ModelManager) -> None:
    with pytest.raises(InternalError):
        infer(manager, "faulty", command("os_exit"))
    assert infer(manager, "faulty", command("ok"))["OUTPUT0"][0] == b"ok"  # held, then sent to the new one


def test_a_worker_that_cannot_restart_leaves_the_model_unavailable(tmp_path: Path) -> None:
    repository = copy_models(tmp_path, "faulty")
    manager = manager_for(repository)
    try:
        (repository / "faulty" / "fail_initialize").touch()
        with pytest.raises(InternalError, match="not healthy"):
            infer(manager, "faulty", command("os_exit"))
        wait_until(
            lambda: "could not be restarted" in (manager.get("faulty").unavailable_reason() or ""),
            what="the failed restart",
        )
        reason = manager.get("faulty").unavailable_reason() or ""
        assert "RuntimeError: initialize refused: fail_initialize exists" in reason
        assert not manager.all_ready()
        with pytest.raises(Unavailable, match="could not be restarted"):
            infer(manager, "faulty", command("ok"))
    finally:
        manager.stop()


def test_a_request_queued_behind_a_hung_one_runs_on_the_restarted_worker(manager: ModelManager) -> None:
    pid = _pid(manager)
    version = manager.get("faulty")

    async def scenario() -> tuple[BaseException | Outputs, BaseException | Outputs]:
        hung = asyncio.ensure_future(
            version.scheduler.execute(request(command("hang"), version.output_names))
        )
        await asyncio.sleep(0.3)  # the hung execution is running (and has its timer) when this one follows
        queued = asyncio.ensure_future(
            version.scheduler.execute(request(command("ok"), version.output_names))
        )
        results = await asyncio.gather(hung, queued, return_exceptions=True)
        return results[0], results[1]

    hung, queued = asyncio.run(scenario())
    assert isinstance(hung, InternalError) and "execute timeout" in hung.message, hung
    assert not isinstance(queued, BaseException), queued
    assert queued["OUTPUT0"][0] == b"ok"
    assert int(queued["OUTPUT0"][1]) != pid  # it ran on the new worker


def test_a_model_stuck_in_an_execution_reports_not_ready_until_it_recovers(tmp_path: Path) -> None:
    repository = copy_models(tmp_path, "faulty")
    config = repository / "faulty" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('string_value: "1"', 'string_value: "3"')
        + 'parameters { key: "STUCK_EXECUTION_SECONDS" value: { string_value: "0.3" } }\n'
    )
    manager = manager_for(repository)
    try:
        version = manager.get("faulty")

        async def scenario() -> BaseException | Outputs:
            hung = asyncio.ensure_future(
                version.scheduler.execute(request(command("hang"), version.output_names))
            )
            await asyncio.sleep(0.1)
            assert manager.is_ready("faulty")  # running, but not for long yet
            deadline = time.monotonic() + 2.5
            while manager.is_ready("faulty"):
                assert time.monotonic() < deadline, "still ready while stuck"
                await asyncio.sleep(0.02)
            reason = version.unavailable_reason() or ""
            assert "longer than stuck-execution-seconds (0.3 s)" in reason, reason
            return (await asyncio.gather(hung, return_exceptions=True))[0]

        assert isinstance(asyncio.run(scenario()), InternalError)  # the execute timeout ended it
        wait_until(lambda: manager.is_ready("faulty"), what="readiness after the restart")
    finally:
        manager.stop()


def test_a_model_whose_initialize_failed_is_not_finalized(tmp_path: Path) -> None:
    repository = copy_models(tmp_path, "init_fails")
    (repository / "init_fails" / "1" / "model.py").write_text(
        "import os\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        self.folder = args['model_repository']\n"
        "        raise RuntimeError('no weights here')\n"
        "    def finalize(self):\n"
        "        open(os.path.join(self.folder, 'finalized'), 'w').close()\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    manager = manager_for(repository)
    manager.stop()
    assert not (repository / "init_fails" / "finalized").exists()
