"""The `redis` response cache: entries in a Redis server (the `redis` package, `pip install nereid[redis]`).

Timeouts are short: a Redis server that does not answer costs a request at most the timeout, and the
request is then served without the cache. At start, though, the server must answer: as in Triton, a Redis
that cannot be reached or refuses the credentials keeps the server from starting (`probe`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from typing import Any, TypeVar

from nereid.errors import Unavailable
from nereid.settings import CacheSettings

KEY_PREFIX = b"nereid:response:"
T = TypeVar("T")


async def _in_task(call: Awaitable[T]) -> T:
    """redis times its calls out with asyncio.timeout, which needs a Task; an HTTP handler may run
    outside one until it first waits."""
    if asyncio.current_task() is None:
        return await asyncio.ensure_future(call)
    return await call


def probe(settings: CacheSettings) -> None:
    """Connect, authenticate and PING once, with plain RESP over a socket so that a refusal reads as Redis
    wrote it (`WRONGPASS ...`, `NOAUTH ...`); raise Unavailable with Triton's wording when that fails."""
    prefix = "Failed to initialize RedisCache: "
    where = f"{settings.host}:{settings.port}"
    commands = [[b"PING"]]
    if settings.password:
        auth = [settings.user, settings.password] if settings.user else [settings.password]
        commands.insert(0, [b"AUTH", *(part.encode() for part in auth)])
    try:
        with socket.create_connection((settings.host, settings.port), settings.timeout_ms / 1000) as conn:
            replies = conn.makefile("rb")
            for command in commands:
                conn.sendall(
                    b"".join([b"*%d\r\n" % len(command), *(b"$%d\r\n%s\r\n" % (len(a), a) for a in command)])
                )
                reply = replies.readline().decode(errors="replace").strip()
                if not reply or reply.startswith("-"):
                    raise Unavailable(prefix + (reply[1:] or f"no reply from Redis ({where})"))
    except OSError as exc:
        raise Unavailable(f"{prefix}failed to connect to Redis ({where}): {exc.strerror or exc}") from None


class RedisStore:
    def __init__(self, settings: CacheSettings) -> None:
        try:
            from redis import asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
        except ImportError:
            raise Unavailable(
                "--cache-config=redis needs the redis package: pip install 'nereid[redis]'"
            ) from None
        timeout_s = settings.timeout_ms / 1000
        self._client = aioredis.Redis(
            host=settings.host,
            port=settings.port,
            username=settings.user or None,
            password=settings.password or None,
            db=settings.db,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),  # a request waits for one attempt at most, then goes on without
        )
        self._ttl_s = settings.ttl_s

    async def get(self, digest: bytes) -> bytes | None:
        entry: Any = await _in_task(self._client.get(KEY_PREFIX + digest))
        return entry if isinstance(entry, bytes) else None

    async def set(self, digest: bytes, entry: bytes) -> None:
        await _in_task(self._client.set(KEY_PREFIX + digest, entry, ex=self._ttl_s or None))

    def close(self) -> None:
        # The connections close with the event loop; nothing holds resources outside it.
        pass
