"""The `local` response cache: entries in this process, at most `size` bytes of them, least recently used
out first. An entry larger than the whole cache is refused (EntryTooLarge) and not kept."""

from __future__ import annotations

import collections
import threading


class EntryTooLarge(Exception):
    def __init__(self, needed: int, size: int) -> None:
        super().__init__(f"Requested byte_size: {needed} is greater than total cache size: {size}")


class LocalStore:
    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0  # bytes of the entries held
        self._entries: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._lock = threading.Lock()  # the metrics exporter reads `used` from its own thread

    async def get(self, digest: bytes) -> bytes | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is not None:
                self._entries.move_to_end(digest)
            return entry

    async def set(self, digest: bytes, entry: bytes) -> None:
        cost = len(entry) + len(digest)
        if cost > self.size:
            raise EntryTooLarge(cost, self.size)
        with self._lock:
            old = self._entries.pop(digest, None)
            if old is not None:
                self.used -= len(old) + len(digest)
            while self.used + cost > self.size:
                evicted_digest, evicted = self._entries.popitem(last=False)
                self.used -= len(evicted) + len(evicted_digest)
            self._entries[digest] = entry
            self.used += cost

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0
