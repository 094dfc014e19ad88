"""Triton's shared-memory extensions: regions clients register, that inputs are read from and outputs
written into, within the registered bounds only.

System regions are POSIX shared memory objects (`/dev/shm/<key>`), mapped once at registration.
CUDA regions are device memory a client shares by its CUDA IPC handle; they need a GPU host and the
`cuda` extra (CuPy), and without them registration says why. Both kinds share one namespace, as in Triton.
"""

from __future__ import annotations

import base64
import binascii
import mmap
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nereid.cuda_memory import IPC_HANDLE_SIZE, CudaMemory
from nereid.errors import AlreadyExists, InternalError, InvalidArgument, NotFound, Unsupported

_SHM_ROOT = "/dev/shm"
_SIZE_LIMIT = 2**64  # offsets and sizes are 64-bit unsigned in Triton
# Keys with this prefix belong to regions the Python backend makes for itself.
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
# Triton's words when clients may not register regions (its clients look for them); status UNSUPPORTED
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
# A POSIX shared memory name: one leading slash at most, then one path component.
_KEY = re.compile(r"/?[^/\0]+")


@dataclass(frozen=True)
class SharedMemoryRef:
    """Where a request's tensor lives: `byte_size` bytes at `offset` inside a registered region."""

    region: str
    offset: int
    byte_size: int


# How long a system region's size, as fstat last gave it, is taken as current (ns).
_SIZE_CHECK_NS = 10_000_000


@dataclass
class _SystemRegion:
    """A registered POSIX shared memory object. Its descriptor is kept open to notice a client shrinking
    the object, which would make reads past its new end fault. That check is a guard, not a guarantee (a
    shrink while a model reads the region still faults, as it does in Triton): its size is read again at
    most every 10 ms, which spares a request the system call per tensor that costs more than the rest of
    its shared-memory work on a loaded host."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    fd: int
    users: int = 0  # requests in flight that read or write the region
    unregistering: bool = False  # unregistered while in use: it goes once its last user is done
    _size: int = 0  # the object's size when last read, valid until `_size_until` (monotonic ns)
    _size_until: int = 0

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def read(self, start: int, byte_size: int) -> memoryview:
        now = time.monotonic_ns()
        size = self._size
        if now >= self._size_until:
            try:
                size = self._size = os.fstat(self.fd).st_size
            except OSError:  # unregistered (and its descriptor closed) since the lookup
                raise NotFound(f"Unable to find shared memory region: '{self.name}'") from None
            self._size_until = now + _SIZE_CHECK_NS
        start += self.offset
        if start + byte_size > size:
            raise InvalidArgument(
                f"shared memory region '{self.name}' shrank to {size} bytes after it was registered"
            )
        return memoryview(self.mapping)[start : start + byte_size]

    def write(self, start: int, data: memoryview) -> None:
        self.read(start, data.nbytes)[:] = data

    def close(self) -> None:
        """The mapping is not closed here: arrays of requests may still view it; it is unmapped once the
        last of them is gone."""
        fd, self.fd, self._size_until = self.fd, -1, 0  # a later read finds it gone (fstat(-1) fails)
        os.close(fd)


@dataclass
class _CudaRegion:
    name: str
    memory: CudaMemory
    users: int = 0
    unregistering: bool = False

    @property
    def byte_size(self) -> int:
        return self.memory.byte_size

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.memory.device_id, "byte_size": self.memory.byte_size}

    def read(self, start: int, byte_size: int) -> memoryview:
        return self.memory.read(start, byte_size)

    def write(self, start: int, data: memoryview) -> None:
        self.memory.write(start, data)

    def close(self) -> None:
        self.memory.close()


_Region = _SystemRegion | _CudaRegion


class SharedMemoryRegistry:
    """Registered regions by name; safe to use from the event loop and from worker threads."""

    def __init__(self, allowed: bool = True) -> None:
        self._allowed = allowed
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    # system shared memory
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_allowed()
        _check_key(name, key)
        if not _KEY.fullmatch(key) or key.strip("/") in (".", ".."):
            raise InvalidArgument(
                f"Unable to open shared memory region: '{key}': a key is one POSIX shared memory name, "
                "such as '/my_region'"
            )
        if offset < 0 or byte_size < 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            self._check_new(name)
            path = os.path.join(_SHM_ROOT, key.lstrip("/"))
            try:
                # O_NOFOLLOW: a link planted in /dev/shm cannot point the server at another file.
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            except OSError as exc:  # INTERNAL, as Triton answers a failed shm_open
                raise InternalError(f"Unable to open shared memory region: '{key}': {exc.strerror}") from None
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size or byte_size == 0:
                    raise InvalidArgument(
                        f"failed to register shared memory region '{name}': invalid args (offset {offset} + "
                        f"byte_size {byte_size} does not fit the {size} bytes of '{key}')"
                    )
                mapping = mmap.mmap(fd, offset + byte_size)
            except BaseException:
                os.close(fd)
                raise
            self._regions[name] = _SystemRegion(name, key, offset, byte_size, mapping, fd)

    def unregister_system(self, name: str | None = None) -> None:
        """Forget one region (or all). As in Triton, a region that requests in flight use stays (listed, and
        usable by new requests) until the last of them is done, then goes without another call."""
        self._check_allowed()
        self._unregister(name, _SystemRegion)

    def system_status(self, name: str | None = None) -> list[dict[str, Any]]:
        return self._status(name, _SystemRegion, "system")

    # CUDA shared memory
    def register_cuda(self, name: str, raw_handle: str, device_id: int, byte_size: int) -> None:
        self._check_allowed()
        try:
            # Line breaks and other characters outside the alphabet are skipped, as Triton's decoder skips
            # them: C++ clients (perf_analyzer) wrap their base64 every 72 characters.
            handle = base64.b64decode(raw_handle)
        except (binascii.Error, ValueError):
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t") from None
        if len(handle) != IPC_HANDLE_SIZE:
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        if device_id < 0 or byte_size <= 0:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            self._check_new(name)
            # Opened under the lock: two registrations of one name cannot both open the handle.
            memory = CudaMemory.open(name, handle, device_id, byte_size)
            self._regions[name] = _CudaRegion(name, memory)

    def unregister_cuda(self, name: str | None = None) -> None:
        self._check_allowed()
        self._unregister(name, _CudaRegion)

    def cuda_status(self, name: str | None = None) -> list[dict[str, Any]]:
        return self._status(name, _CudaRegion, "cuda")

    # both kinds
    def _check_new(self, name: str) -> None:
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")

    def _status(self, name: str | None, kind: type, label: str) -> list[dict[str, Any]]:
        with self._lock:
            if name is None:
                return [region.status() for region in self._regions.values() if isinstance(region, kind)]
            region = self._regions.get(name)
        if region is None or not isinstance(region, kind):
            raise NotFound(f"Unable to find {label} shared memory region: '{name}'")
        return [region.status()]

    def _unregister(self, name: str | None, kind: type | None) -> None:
        with self._lock:
            names = list(self._regions) if name is None else [name]
            for region_name in names:
                region = self._regions.get(region_name)
                # a name of the other kind is left alone, as an unknown name is
                if region is None or (kind is not None and not isinstance(region, kind)):
                    continue
                if region.users:
                    region.unregistering = True
                else:
                    self._remove(region)

    def acquire(self, names: Iterable[str]) -> tuple[str, ...]:
        """Mark the regions a request uses as in use until `release`; the names acquired (those registered).
        Call when the request is admitted, and release once its outputs are written."""
        acquired = []
        with self._lock:
            for name in dict.fromkeys(names):
                region = self._regions.get(name)
                if region is not None:
                    region.users += 1
                    acquired.append(name)
        return tuple(acquired)

    def release(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                region = self._regions.get(name)
                if region is None or region.users == 0:
                    continue
                region.users -= 1
                if region.users == 0 and region.unregistering:
                    self._remove(region)

    def _remove(self, region: _Region) -> None:
        """Under the lock."""
        del self._regions[region.name]
        region.close()

    # tensors
    def view(self, ref: SharedMemoryRef) -> memoryview:
        """The bytes a request names, checked against the region's bounds (a host copy for a CUDA region)."""
        region = self._lookup(ref)
        return region.read(ref.offset, ref.byte_size)

    def write(self, ref: SharedMemoryRef, output: str, data: bytes) -> None:
        region = self._lookup(ref)
        raw = memoryview(data).cast("B")
        if raw.nbytes > ref.byte_size:
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{output}' ({ref.byte_size} bytes) "
                f"should be at least {raw.nbytes} bytes to hold the results"
            )
        region.write(ref.offset, raw)

    def _lookup(self, ref: SharedMemoryRef) -> _Region:
        with self._lock:
            region = self._regions.get(ref.region)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{ref.region}'")
        _check_span(ref, region.byte_size)
        return region

    def close(self) -> None:
        self._unregister(None, None)

    def _check_allowed(self) -> None:
        if not self._allowed:
            raise Unsupported(CLIENT_SHM_DISABLED)


def _check_key(name: str, key: str) -> None:
    """Triton's rules: a key is not slashes alone, and does not take the Python backend's own prefix."""
    bare = key.lstrip("/")
    if not bare:
        raise InvalidArgument(f"cannot register shared memory region '{name}' - invalid shm key '{key}'")
    if bare.startswith(RESERVED_KEY_PREFIX):
        raise InvalidArgument(
            f"cannot register shared memory region '{name}' with key '{key}' as the key contains the "
            f"reserved prefix '{RESERVED_KEY_PREFIX}'"
        )


def _check_span(ref: SharedMemoryRef, region_size: int) -> None:
    """A request's span inside a region, checked in Triton's order and words. Offsets and sizes are
    unsigned on the wire; a negative one came from an overflowing client value."""
    offset, byte_size = ref.offset % _SIZE_LIMIT, ref.byte_size % _SIZE_LIMIT
    if offset >= region_size:
        raise InvalidArgument(f"Invalid offset for shared memory region: '{ref.region}'")
    if byte_size > _SIZE_LIMIT - 1 - offset:
        raise InvalidArgument(
            f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value "
            f"({_SIZE_LIMIT - 1}) for region '{ref.region}'"
        )
    if byte_size == 0 or offset + byte_size > region_size:
        raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{ref.region}'")


def check_outputs_fit(registry: SharedMemoryRegistry, refs: dict[str, SharedMemoryRef]) -> None:
    """Before running: every output region exists and holds its span, and no two outputs overlap
    (they would overwrite each other)."""
    for ref in refs.values():
        registry.view(ref)
    spans = sorted((ref.region, ref.offset, ref.offset + ref.byte_size, name) for name, ref in refs.items())
    for (region_a, _, end_a, name_a), (region_b, start_b, _, name_b) in zip(spans, spans[1:], strict=False):
        if region_a == region_b and start_b < end_a:
            raise InvalidArgument(
                f"outputs '{name_a}' and '{name_b}' overlap in shared memory region '{region_a}'"
            )
