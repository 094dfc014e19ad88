"""The worker's side of the socket, shared by the main loop and by model threads.

The main loop reads the server's frames and runs them one at a time. Model code may also wait for the
server: a BLS call waits for its answer, `is_cancelled` looks for a cancellation. It may do so while
execute runs (the main loop is busy) or from its own threads after execute returned (the main loop is
idle, reading). So whichever thread reads the socket (under `read_lock`) delivers the frames meant for
model code at once, and keeps the others for the main loop: a waiting thread either reads itself, when
the lock is free, or is woken by the thread that read its answer.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections import deque
from typing import Callable

from . import wire

_WAIT_S = 0.02  # how long a waiting thread reads before it lets the main loop have the socket again
# How long the main thread waits on the server before it runs executions that came meanwhile: enough for
# most calls to be answered first, so that model code is entered again only when waiting takes long.
NESTED_AFTER_S = 0.01


class Call:
    """An outstanding request to the server (BLS or model control): its answer frames, as they come."""

    def __init__(self, call_id: int) -> None:
        self.id = call_id
        self.frames: deque[tuple] = deque()
        self.event = threading.Event()

    def put(self, frame: tuple) -> None:
        self.frames.append(frame)
        self.event.set()


class ServerGone(Exception):
    """The server closed the connection while model code waited for it."""


class Channel:
    def __init__(self, sock: socket.socket, reader: wire.FrameReader, send: Callable[..., None]) -> None:
        self._sock = sock
        self._reader = reader
        self.send = send  # thread-safe
        self.read_lock = threading.Lock()
        self.frames: list[tuple] = []  # for the main loop, in order
        self.cancelled: set[int] = set()  # stream ids of requests whose clients went away
        self._calls: dict[int, Call] = {}
        self._ids = itertools.count(1)
        self.closed = False
        # Runs an EXECUTE frame: set by the worker once the model is up.
        self.nested: Callable[[tuple], None] | None = None

    def deliver(self, frames: list[tuple]) -> None:
        """Hand out what was read (call with read_lock held)."""
        for frame in frames:
            kind = frame[0]
            if kind == wire.CANCEL:
                self.cancelled.add(frame[1])
            elif kind == wire.BLS_RESPONSE or kind == wire.CONTROL_DONE:
                call = self._calls.get(frame[1])
                if call is not None:
                    call.put(frame)
            else:
                self.frames.append(frame)

    def start(self, message: Callable[[int], tuple]) -> Call:
        """Send the frame `message(call_id)` and return the call its answers go to."""
        call = Call(next(self._ids))
        self._calls[call.id] = call
        try:
            self.send(message(call.id))
        except BaseException:
            self._calls.pop(call.id, None)
            raise
        return call

    def finish(self, call: Call) -> None:
        self._calls.pop(call.id, None)

    def next_frame(self, call: Call, timeout_s: float | None = None) -> tuple | None:
        """The call's next answer frame, waiting for it; None when `timeout_s` passed first."""
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        on_main = threading.current_thread() is threading.main_thread()
        while not call.frames:
            if self.closed:
                raise ServerGone("the server closed the connection")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if on_main and now - started >= NESTED_AFTER_S and self._run_nested():
                continue
            if self.read_lock.acquire(blocking=False):
                try:
                    if not call.frames:
                        self._read_once(_WAIT_S)
                finally:
                    self.read_lock.release()
            else:  # another thread reads, and wakes us when our answer comes
                call.event.wait(_WAIT_S)
            call.event.clear()
        return call.frames.popleft()

    def _run_nested(self) -> bool:
        """Run the oldest execution that came while the main thread waits in a BLS call. Without this,
        a model that calls itself through other models with all its instances waiting would wait for
        ever: the request it waits for would be queued behind its own execution."""
        nested = self.nested
        if nested is None:
            return False
        frames = self.frames
        for index, frame in enumerate(frames):
            if frame[0] == wire.EXECUTE:
                del frames[index]  # only this thread takes frames out
                nested(frame)
                return True
        return False

    def is_cancelled(self, stream_id: int) -> bool:
        if stream_id in self.cancelled:
            return True
        # The main loop may be busy in execute: look at what has arrived, without waiting.
        if self.read_lock.acquire(blocking=False):
            try:
                self._read_once(0.0)
            finally:
                self.read_lock.release()
        return stream_id in self.cancelled

    def _read_once(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self._sock], [], [], timeout_s)
        if not ready:
            return
        try:
            frames = wire.receive(self._sock, self._reader, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if frames is None:
            self.closed = True
            self.deliver([(wire.FINALIZE,)])  # the main loop ends, as it would have on reading this
            return
        self.deliver(frames)
