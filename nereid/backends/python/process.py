"""One worker process as the server sees it: start it, talk to it while no event loop watches it, stop it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nereid.backends.python.worker import wire
from nereid.errors import InternalError, Unavailable
from nereid.log_settings import log_at

log = logging.getLogger("nereid.backends.python")

WORKER_MAIN = Path(wire.__file__).resolve().parent / "__main__.py"

# pb_utils.Logger levels -> logging levels
LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


def model_log(level: int, text: str, label: str) -> None:
    """A pb_utils.Logger message (`<file>:<line>] <message>`), logged as from the model's file and line,
    as Triton logs it; anything else with the instance's label."""
    python_level = LOG_LEVELS.get(level, logging.INFO)
    place, sep, message = text.partition("] ")
    filename, colon, line = place.rpartition(":")
    if sep and colon and line.isdigit():
        log_at(log, python_level, filename, int(line), message)
    else:
        log.log(python_level, "%s: %s", label, text)


@dataclass(frozen=True)
class WorkerLaunch:
    """How to start the workers of one model: which Python, its environment, and the limits."""

    python: str
    environment: Mapping[str, str] | None  # None: the server's own
    arena_size: int = 1 << 20
    stub_timeout_s: float = 30.0  # for control exchanges that must not hang: finalize
    execute_timeout_s: float = 0.0  # 0: an execution may take as long as it takes
    stuck_after_s: float = 0.0  # an execution running longer makes the model not ready; 0: never
    busy_wait_us: int = 0  # how long an idle worker polls for its next request before it sleeps


def exit_description(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


# Every worker still running, so that a server out of time on its way out can kill them all at once.
_LIVE: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()


def kill_all_workers() -> int:
    """SIGKILL every Python worker still running (a hung model must not hold the server's exit); returns
    how many were killed."""
    killed = 0
    for worker in list(_LIVE):
        if worker.process.poll() is None:
            worker.kill_reason = "was killed because the server is exiting"
            worker.kill()
            killed += 1
    return killed


@dataclass(eq=False)
class WorkerProcess:
    """A started worker: its process, the server's end of the socket, and the two tensor arenas."""

    process: subprocess.Popen[bytes]
    sock: socket.socket
    label: str
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    # Per pipeline slot (execution number % PIPELINE_DEPTH): the server's arena for request inputs, and
    # the worker's for response outputs.
    inputs: list[wire.TensorWriter] = field(default_factory=list)
    outputs: list[wire.Arena | None] = field(default_factory=list)  # by slot, as the worker grows them
    executions: int = 0  # EXECUTE frames sent so far
    has_is_ready: bool = False
    kill_reason: str | None = None  # set when the server kills it (execute timeout)
    timed_out: bool = False  # killed because its oldest execution outlived the execute timeout
    frames: list[tuple[Any, ...]] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None  # the event loop watching the socket
    outbox: Any = None  # the frames the socket could not take yet (an Outbox, made on the loop)
    # Answers custom metric operations (METRIC frames) that come during blocking exchanges (initialize)
    on_metric: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None

    @classmethod
    def spawn(cls, launch: WorkerLaunch, label: str) -> WorkerProcess:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = subprocess.Popen(
                [launch.python, str(WORKER_MAIN), "--fd", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=dict(launch.environment) if launch.environment is not None else None,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            parent.close()
            raise Unavailable(f"cannot start a Python worker with '{launch.python}': {exc}") from None
        finally:
            child.close()
        worker = cls(process, parent, label)
        _LIVE.add(worker)
        return worker

    # blocking exchanges, before an event loop watches the socket (or after it stopped)
    def request(
        self, message: tuple[Any, ...], expect: str, timeout_s: float | None = None
    ) -> tuple[Any, ...]:
        """Send a frame and wait for the answer of kind `expect` (or ERROR); log frames on the way."""
        self.sock.setblocking(True)
        self.sock.settimeout(timeout_s)
        try:
            wire.send(self.sock, wire.encode(message))
            while True:
                while self.frames:
                    frame = self.frames.pop(0)
                    if frame[0] == wire.LOG:
                        self.log_frame(frame)
                    elif frame[0] == wire.METRIC:
                        answer = self.on_metric(frame) if self.on_metric is not None else None
                        if answer is not None:
                            wire.send(self.sock, wire.encode(answer))
                    elif frame[0] in (expect, wire.ERROR):
                        return frame
                frames = wire.receive(self.sock, self.reader)
                if frames is None:
                    raise Unavailable(self.death_text())
                self.frames.extend(frames)
        except TimeoutError:
            raise Unavailable(f"Python worker of {self.label} did not answer within {timeout_s} s") from None
        except OSError as exc:
            raise Unavailable(f"lost the connection to the Python worker of {self.label}: {exc}") from None

    def death_text(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return f"the Python worker of {self.label} {exit_description(code)}"

    def log_frame(self, frame: tuple[Any, ...]) -> None:
        _, level, message = frame
        model_log(level, message, self.label)

    def stop(self, timeout_s: float) -> None:
        """Ask the worker to finalize and exit; kill it when it does not within the timeout. Idempotent."""
        if self.process.poll() is None:
            try:
                _, error = self.request((wire.FINALIZE,), wire.FINALIZED, timeout_s)
                if error:
                    log.error("%s: finalize failed: %s", self.label, error)
            except (Unavailable, InternalError) as exc:
                log.warning("%s: %s", self.label, exc.message)
        self.close_channel()
        self.wait_or_kill(timeout_s)

    def wait_or_kill(self, timeout_s: float) -> None:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close_channel(self) -> None:
        """Release the socket and both arenas (the kernel frees shared memory when both sides have)."""
        self.sock.close()
        self.reader.close()
        for writer in self.inputs:
            writer.arena.close()
        self.inputs = []
        for arena in self.outputs:
            if arena is not None:
                arena.close()
        self.outputs = []


def start_worker(
    launch: WorkerLaunch,
    label: str,
    first: tuple[Any, ...],
    on_error: Callable[[str], Exception],
    expect: str = wire.READY,
    spare: WorkerProcess | None = None,
    on_metric: Callable[[tuple[Any, ...]], tuple[Any, ...] | None] | None = None,
) -> tuple[WorkerProcess, tuple[Any, ...]]:
    """Spawn a worker (or take over a spare one) and send it a frame (INIT or AUTO_COMPLETE); returns the
    worker and its answer. On failure the worker is gone and `on_error` says why."""
    started = time.monotonic()
    if spare is not None and spare.process.poll() is None:
        worker = spare
        worker.label = label
    else:
        worker = WorkerProcess.spawn(launch, label)
    worker.on_metric = on_metric
    try:
        reply = worker.request(first, expect)
    except Unavailable as exc:
        worker.kill()
        worker.close_channel()
        worker.wait_or_kill(launch.stub_timeout_s)
        raise on_error(exc.message) from None
    if reply[0] == wire.ERROR:
        worker.stop(launch.stub_timeout_s)
        raise on_error(reply[1])
    if reply[0] == wire.READY:
        worker.has_is_ready = bool(reply[1])
        worker.inputs = [wire.TensorWriter(launch.arena_size) for _ in range(wire.PIPELINE_DEPTH)]
    log.debug("%s: worker %d answered in %.2f s", label, worker.process.pid, time.monotonic() - started)
    return worker, reply
