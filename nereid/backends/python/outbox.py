"""Frames to a worker that its socket could not take at once, sent as it drains, without blocking the loop.

Most frames are small, but BLS answers carry their tensors inline and may be megabytes. A worker may be
sending a large frame of its own at that moment (a BLS request from another execution) and read nothing
until the server has read it: waiting on the loop for the worker to read would then stall the whole
server, and both sides would wait on each other. So the rest of a frame waits here, later frames queue
behind it in order (with a copy of any file descriptor they pass), and the loop sends on whenever the
socket is writable. A worker that takes nothing
for `stall_s` is treated as hung.
"""

from __future__ import annotations

import array
import asyncio
import collections
import os
import socket
from collections.abc import Callable


def send(sock: socket.socket, data: memoryview | bytes, fd: int) -> int:
    """Bytes the socket took now (0 when full); a file descriptor travels with the first byte."""
    try:
        if fd >= 0:
            return sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        return sock.send(data)
    except BlockingIOError:
        return 0


class Outbox:
    """The unsent part of a worker's frames, in order."""

    def __init__(self, sock: socket.socket, stall_s: float, on_stall: Callable[[], None]) -> None:
        self._sock = sock
        self._stall_s = stall_s
        self._on_stall = on_stall
        self._pending: collections.deque[tuple[memoryview, int]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self._pending)

    def write(self, frame: bytes, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        """Send what the socket takes now and the rest when it drains. Raises OSError if the worker is gone."""
        if not self._pending:
            sent = send(self._sock, frame, fd)
            if sent == len(frame):
                return
            self._pending.append((memoryview(frame)[sent:], -1 if sent or fd < 0 else os.dup(fd)))
            self._loop = loop
            loop.add_writer(self._sock.fileno(), self._flush)
            self._arm()
            return
        self._pending.append((memoryview(frame), os.dup(fd) if fd >= 0 else -1))

    def clear(self) -> None:
        """Drop what waits (the worker is gone or being replaced)."""
        while self._pending:
            _, fd = self._pending.popleft()
            if fd >= 0:
                os.close(fd)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed() and self._sock.fileno() >= 0:
            loop.remove_writer(self._sock.fileno())

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer = self._loop.call_later(self._stall_s, self._stalled)

    def _flush(self) -> None:
        progressed = False
        while self._pending:
            data, fd = self._pending[0]
            try:
                sent = send(self._sock, data, fd)
            except OSError:  # the worker is gone; its exit fails the executions
                self.clear()
                return
            if sent and fd >= 0:  # it went with the first byte: the copy kept for it is done
                os.close(fd)
                fd = -1
            progressed = progressed or sent > 0
            if sent < len(data):
                self._pending[0] = (data[sent:], fd)
                if progressed:
                    self._arm()
                return
            self._pending.popleft()
        self.clear()

    def _stalled(self) -> None:
        self._timer = None
        self.clear()
        self._on_stall()
