"""The response cache's parts: keys, entries, the byte-bounded local store, Redis, and failures as misses."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from nereid.cache import ResponseCache, cache_key, create_cache, probe_cache
from nereid.cache.entry import decode_entry, encode_entry
from nereid.cache.local import LocalStore
from nereid.errors import Unavailable
from nereid.settings import CacheSettings
from nereid.types import InferTensor
from tests.cache.conftest import free_port


def _key(value: int = 1, shape: tuple[int, ...] = (1, 2), outputs: tuple[tuple[str, int], ...] = (("O", 0),)):
    data = np.full(shape, value, np.int32)
    return cache_key("m", "1", {"A": ("INT32", data)}, outputs)


def _outputs(value: int = 7) -> list[InferTensor]:
    return [
        InferTensor("O", "INT32", (1, 2), np.full((1, 2), value, np.int32)),
        InferTensor("S", "BYTES", (2,), np.array([b"a", b"\xff"], dtype=np.object_)),
    ]


def test_keys_differ_in_every_part_of_the_request() -> None:
    base = _key()
    assert _key() == base
    others = [
        _key(value=2),
        _key(shape=(2, 1)),
        _key(outputs=(("O", 3),)),
        _key(outputs=()),
        cache_key("m", "2", {"A": ("INT32", np.full((1, 2), 1, np.int32))}, (("O", 0),)),
        cache_key("m", "1", {"A": ("UINT32", np.full((1, 2), 1, np.uint32))}, (("O", 0),)),
        cache_key("m", "1", {"B": ("INT32", np.full((1, 2), 1, np.int32))}, (("O", 0),)),
    ]
    assert len({k.digest for k in others} | {base.digest}) == len(others) + 1


def test_entries_round_trip_and_refuse_another_key() -> None:
    key = _key()
    entry = encode_entry(key.material, _outputs())
    outputs = decode_entry(entry, key.material)
    assert outputs is not None
    assert outputs[0].data.tolist() == [[7, 7]] and outputs[0].shape == (1, 2)
    assert outputs[1].data.tolist() == [b"a", b"\xff"] and outputs[1].datatype == "BYTES"
    # Same digest slot, another request: a collision is a miss, never someone else's answer.
    assert decode_entry(entry, _key(value=2).material) is None


def test_a_colliding_digest_is_a_miss() -> None:
    store = LocalStore(1 << 20)
    cache = ResponseCache(store)
    key, other = _key(1), _key(2)

    async def go() -> None:
        await cache.insert(key, _outputs())
        forged = type(other)(key.digest, other.material)  # as if both hashed alike
        assert await cache.lookup(forged) is None
        assert (await cache.lookup(key)) is not None

    asyncio.run(go())


def test_the_local_store_stays_within_its_bytes_evicting_the_least_recently_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry_size = len(encode_entry(_key().material, _outputs())) + 16
    store = LocalStore(entry_size * 3)
    cache = ResponseCache(store)
    keys = [_key(v) for v in range(5)]

    async def go() -> list[bool]:
        for key in keys[:3]:
            await cache.insert(key, _outputs())
        await cache.lookup(keys[0])  # now the most recently used
        await cache.insert(keys[3], _outputs())  # evicts keys[1]
        await cache.insert(keys[4], _outputs())  # evicts keys[2]
        return [await cache.lookup(k) is not None for k in keys]

    assert asyncio.run(go()) == [True, False, False, True, True]
    assert store.used <= store.size and len(store) == 3
    huge = [InferTensor("O", "INT8", (entry_size * 4,), np.zeros(entry_size * 4, np.int8))]
    with caplog.at_level(logging.ERROR, logger="nereid.cache"):
        asyncio.run(cache.insert(_key(9), huge))  # larger than the whole cache: not kept, nothing evicted
    assert len(store) == 3
    # Triton's error line, which its QA suite looks for
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"Failed to insert key [{_key(9).digest.hex()}] into response cache: "
    )
    assert f"is greater than total cache size: {store.size}" in record.getMessage()


class _BrokenStore:
    def __init__(self) -> None:
        self.broken = True
        self.entries: dict[bytes, bytes] = {}

    async def get(self, digest: bytes) -> bytes | None:
        if self.broken:
            raise ConnectionError("store down")
        return self.entries.get(digest)

    async def set(self, digest: bytes, entry: bytes) -> None:
        if self.broken:
            raise ConnectionError("store down")
        self.entries[digest] = entry

    def close(self) -> None:
        pass


def test_a_failing_store_is_a_miss_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    store = _BrokenStore()
    cache = ResponseCache(store)

    async def go() -> None:
        for _ in range(3):
            assert await cache.lookup(_key()) is None
            await cache.insert(_key(), _outputs())
        store.broken = False
        await cache.insert(_key(), _outputs())
        assert await cache.lookup(_key()) is not None

    with caplog.at_level(logging.WARNING, logger="nereid.cache"):
        asyncio.run(go())
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "response cache lookup failed, serving without the cache until it works"
    ]


def test_redis_stores_entries_and_refused_credentials_are_misses(redis_server: int) -> None:
    good = create_cache(CacheSettings("redis", host="127.0.0.1", port=redis_server, password="secret"))
    bad = create_cache(CacheSettings("redis", host="127.0.0.1", port=redis_server, password="wrong"))

    async def go() -> None:
        assert await good.lookup(_key()) is None
        await good.insert(_key(), _outputs(5))
        found = await good.lookup(_key())
        assert found is not None and found[0].data.tolist() == [[5, 5]]
        assert await bad.lookup(_key()) is None  # refused: a miss, not an error
        await bad.insert(_key(3), _outputs())
        assert await good.lookup(_key(3)) is None

    asyncio.run(go())


def test_an_unreachable_redis_costs_at_most_its_timeout() -> None:
    cache = create_cache(CacheSettings("redis", host="127.0.0.1", port=free_port(), timeout_ms=200))

    async def go() -> float:
        start = time.monotonic()
        assert await cache.lookup(_key()) is None
        return time.monotonic() - start

    assert asyncio.run(go()) < 1.5  # one attempt of 200 ms, no retries


def test_the_start_probe_reports_what_redis_answers(redis_server: int) -> None:
    """At start a Redis cache must answer, or the server does not start: Triton's wording, Redis's reply."""
    address = {"host": "127.0.0.1", "port": redis_server}
    probe_cache(CacheSettings("redis", **address, password="secret"))  # answers: nothing raised
    with pytest.raises(Unavailable, match="^Failed to initialize RedisCache: WRONGPASS "):
        probe_cache(CacheSettings("redis", **address, password="wrong"))
    with pytest.raises(Unavailable, match="^Failed to initialize RedisCache: NOAUTH Authentication required"):
        probe_cache(CacheSettings("redis", **address))
    closed = free_port()
    with pytest.raises(
        Unavailable, match=rf"failed to connect to Redis \(127.0.0.1:{closed}\): Connection refused"
    ):
        probe_cache(CacheSettings("redis", host="127.0.0.1", port=closed))
    probe_cache(CacheSettings("local", size=10))  # a local cache has nothing to reach
