"""Frames to a worker that does not read at the moment wait in its outbox: the loop goes on, the frames
arrive whole and in order once it reads, and a worker that never reads is reported as hung."""

from __future__ import annotations

import array
import asyncio
import os
import socket

from nereid.backends.python.outbox import Outbox

BIG = 8 * 1024 * 1024  # far more than a socket buffer holds


def _pair() -> tuple[socket.socket, socket.socket]:
    server, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.setblocking(False)
    return server, worker


async def _read(sock: socket.socket, count: int) -> bytes:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    data = bytearray()
    while len(data) < count:
        data += await loop.sock_recv(sock, count - len(data))
    return bytes(data)


def test_a_large_frame_waits_without_blocking_and_arrives_in_order() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        server, worker = _pair()
        stalled: list[bool] = []
        outbox = Outbox(server, 30.0, lambda: stalled.append(True))
        first, second = os.urandom(BIG), b"next frame"
        outbox.write(first, -1, loop)  # returns at once, though the worker reads nothing yet
        outbox.write(second, -1, loop)
        assert outbox  # the rest waits
        ticked = asyncio.Event()
        loop.call_soon(ticked.set)
        await asyncio.wait_for(ticked.wait(), 5)  # the loop still turns
        assert await asyncio.wait_for(_read(worker, BIG + len(second)), 30) == first + second
        assert not outbox and not stalled
        server.close()
        worker.close()

    asyncio.run(run())


def test_a_file_descriptor_travels_with_its_frame_behind_a_waiting_one() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        server, worker = _pair()
        outbox = Outbox(server, 30.0, lambda: None)
        outbox.write(os.urandom(BIG), -1, loop)
        read_end, write_end = os.pipe()
        outbox.write(b"with fd", write_end, loop)  # queued behind the large frame
        os.close(write_end)  # the outbox keeps a copy for the frame
        await asyncio.wait_for(_read(worker, BIG), 30)
        worker.setblocking(True)
        fds = array.array("i")
        data, ancillary, _, _ = worker.recvmsg(7, socket.CMSG_LEN(fds.itemsize))
        assert data == b"with fd"
        fds.frombytes(ancillary[0][2][: fds.itemsize])
        os.write(fds[0], b"x")
        assert os.read(read_end, 1) == b"x"
        for fd in (fds[0], read_end):
            os.close(fd)
        server.close()
        worker.close()

    asyncio.run(run())


def test_a_worker_that_never_reads_is_reported_hung() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        server, worker = _pair()
        stalled = asyncio.Event()
        outbox = Outbox(server, 0.2, stalled.set)
        outbox.write(os.urandom(BIG), -1, loop)
        await asyncio.wait_for(stalled.wait(), 10)
        assert not outbox  # dropped: the worker is killed and restarted
        server.close()
        worker.close()

    asyncio.run(run())
