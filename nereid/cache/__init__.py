"""Triton's response cache: `response_cache { enable: true }` per model, `--cache-config` per server.

A cache maps a request's key (nereid.cache.key) to its response's outputs. `local` keeps entries in this
process, bounded in bytes, least recently used out first; `redis` keeps them in a Redis server, shared by
every Nereid that points at it. Lookups and inserts never fail a request: a cache that breaks (Redis down)
counts as a miss, logged once until it works again.
"""

from __future__ import annotations

import logging
from typing import Protocol

from nereid.cache.entry import decode_entry, encode_entry
from nereid.cache.key import CacheKey, cache_key
from nereid.cache.local import EntryTooLarge
from nereid.errors import InvalidArgument
from nereid.settings import CacheSettings
from nereid.types import InferTensor

log = logging.getLogger(__name__)


class CacheStore(Protocol):
    """Where entries live: bytes by digest."""

    async def get(self, digest: bytes) -> bytes | None: ...

    async def set(self, digest: bytes, entry: bytes) -> None: ...

    def close(self) -> None: ...


class ResponseCache:
    """Lookups and inserts of whole responses, over a store; failures of the store are misses."""

    def __init__(self, store: CacheStore) -> None:
        self._store = store
        self._broken = False  # the store failed lately: logged once until it works again

    async def lookup(self, key: CacheKey) -> list[InferTensor] | None:
        try:
            entry = await self._store.get(key.digest)
            outputs = None if entry is None else decode_entry(entry, key.material)
        except Exception as exc:
            self._failed("lookup", exc)
            return None
        self._broken = False
        return outputs

    async def insert(self, key: CacheKey, outputs: list[InferTensor]) -> None:
        try:
            await self._store.set(key.digest, encode_entry(key.material, outputs))
        except EntryTooLarge as exc:  # the cache works; this response is too big for it (Triton's text)
            log.error("Failed to insert key [%s] into response cache: %s", key.digest.hex(), exc)
            return
        except Exception as exc:
            self._failed("insert", exc)
            return
        self._broken = False

    def _failed(self, what: str, exc: Exception) -> None:
        if not self._broken:
            log.warning("response cache %s failed, serving without the cache until it works: %s", what, exc)
            self._broken = True

    def close(self) -> None:
        self._store.close()


def probe_cache(settings: CacheSettings) -> None:
    """At start: a Redis cache must answer (Triton's server does not start otherwise); Unavailable if not."""
    if settings.kind == "redis":
        from nereid.cache.redis import probe

        probe(settings)


def create_cache(settings: CacheSettings) -> ResponseCache:
    """The cache `--cache-config` asks for."""
    if settings.kind == "local":
        from nereid.cache.local import LocalStore

        return ResponseCache(LocalStore(settings.size))
    if settings.kind == "redis":
        from nereid.cache.redis import RedisStore

        return ResponseCache(RedisStore(settings))
    raise InvalidArgument(f"unknown response cache '{settings.kind}': expected 'local' or 'redis'")


__all__ = ["CacheKey", "ResponseCache", "cache_key", "create_cache", "probe_cache"]
