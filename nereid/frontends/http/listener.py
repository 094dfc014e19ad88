"""Listening sockets that take a new connection only while fewer than a cap are open.

asyncio's servers accept every connection the kernel queues, so a client that opens connections without
end (and holds them) runs the process out of file descriptors, and then the server can no longer open a
model's files, start a worker or answer anyone. Here each socket is accepted from by one loop that waits
while the cap is reached: beyond it, new connections wait in the kernel's accept queue (and, when that
is full, clients retry their handshake) instead of failing those being served.
"""

from __future__ import annotations

import asyncio
import resource
import socket
from collections.abc import Callable

# Connections the HTTP endpoint holds open by default: half the process's file descriptors (the rest are
# for gRPC, models and workers), and no more than this.
DEFAULT_MAX_CONNECTIONS_CAP = 10_000
_MIN_CONNECTIONS = 64


def default_max_connections() -> int:
    """Half the process's soft limit on open files, between 64 and DEFAULT_MAX_CONNECTIONS_CAP."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS_CAP
    return max(_MIN_CONNECTIONS, min(DEFAULT_MAX_CONNECTIONS_CAP, soft // 2))


class Listener:
    """Sockets bound to one address; connections are made with `factory` while `open_count()` is below
    `max_connections`. The owner calls `connection_closed` whenever one of them closes."""

    def __init__(
        self, factory: Callable[[], asyncio.Protocol], max_connections: int, open_count: Callable[[], int]
    ) -> None:
        self._factory = factory
        self._max = max_connections
        self._open_count = open_count
        self.sockets: list[socket.socket] = []
        self._loops: list[asyncio.Task[None]] = []
        self._waiters: list[asyncio.Future[None]] = []

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        """Bind and listen on every address `host` names (as asyncio's create_server would)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:  # as asyncio: an IPv6 socket does not take IPv4 too
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(socket.SOMAXCONN)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        self._loops = [loop.create_task(self._accept(sock)) for sock in self.sockets]

    def connection_closed(self) -> None:
        """One connection closed: accepting goes on where it waited for the cap."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        """Stop accepting; connections already made are the owner's."""
        for task in self._loops:
            task.cancel()
        self._loops = []
        for sock in self.sockets:
            sock.close()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self._open_count() >= self._max:
                waiter = loop.create_future()
                self._waiters.append(waiter)
                await waiter
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError:  # out of descriptors or the like, for a moment: the queue keeps the client
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # responses go out in one write
            try:
                await loop.connect_accepted_socket(self._factory, conn)
            except OSError:
                conn.close()
