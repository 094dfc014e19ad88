"""Device memory another process shares through a CUDA IPC handle (Triton's CUDA shared memory), opened
and copied with CuPy, an optional extra (`nereid[cuda]`) imported only when a client registers a region."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nereid.errors import InternalError, InvalidArgument, Unavailable

IPC_HANDLE_SIZE = 64  # bytes of a cudaIpcMemHandle_t


def _cupy(name: str) -> Any:
    try:
        import cupy
    except ImportError:
        raise Unavailable(
            f"failed to register CUDA shared memory region '{name}': CUDA shared memory needs a GPU host "
            "with nereid[cuda] (CuPy) installed"
        ) from None
    return cupy


@dataclass
class CudaMemory:
    """One opened IPC handle: `byte_size` bytes at `pointer` on GPU `device_id`."""

    device_id: int
    byte_size: int
    pointer: int
    _cupy: Any = field(repr=False)
    # copies and the close run under it, so a region is never unmapped while a copy reads it
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, name: str, handle: bytes, device_id: int, byte_size: int) -> CudaMemory:
        cupy = _cupy(name)
        runtime = cupy.cuda.runtime
        try:
            count = runtime.getDeviceCount()
        except runtime.CUDARuntimeError as exc:
            raise Unavailable(
                f"failed to register CUDA shared memory region '{name}': no CUDA device ({exc})"
            ) from None
        if not 0 <= device_id < count:
            raise InvalidArgument(
                f"failed to register CUDA shared memory region '{name}': device {device_id} does not exist "
                f"(this host has {count} CUDA device(s))"
            )
        try:
            with cupy.cuda.Device(device_id):
                pointer = runtime.ipcOpenMemHandle(handle)
        except runtime.CUDARuntimeError as exc:  # Triton answers a handle it cannot open with INVALID_ARG
            raise InvalidArgument(
                f"failed to register CUDA shared memory region '{name}': failed to open CUDA IPC handle: {exc}"
            ) from None
        return cls(device_id, byte_size, pointer, cupy)

    def read(self, offset: int, byte_size: int) -> memoryview:
        """A host copy of the span (requests read inputs as host arrays)."""
        host = np.empty(byte_size, dtype=np.uint8)
        self._copy(host.ctypes.data, self.pointer + offset, byte_size, to_host=True)
        return memoryview(host.data)

    def write(self, offset: int, data: memoryview) -> None:
        source = np.frombuffer(data, dtype=np.uint8)
        self._copy(self.pointer + offset, source.ctypes.data, source.nbytes, to_host=False)

    def _copy(self, destination: int, source: int, byte_size: int, to_host: bool) -> None:
        runtime = self._cupy.cuda.runtime
        kind = runtime.memcpyDeviceToHost if to_host else runtime.memcpyHostToDevice
        with self._lock:
            if self.pointer == 0:
                raise InternalError("CUDA shared memory region was closed while in use")
            try:
                with self._cupy.cuda.Device(self.device_id):
                    runtime.memcpy(destination, source, byte_size, kind)
            except runtime.CUDARuntimeError as exc:
                raise InternalError(f"failed to copy CUDA shared memory: {exc}") from None

    def close(self) -> None:
        with self._lock:
            pointer, self.pointer = self.pointer, 0
            if pointer:
                runtime = self._cupy.cuda.runtime
                try:
                    with self._cupy.cuda.Device(self.device_id):
                        runtime.ipcCloseMemHandle(pointer)
                except runtime.CUDARuntimeError:  # the client's process may have freed it already
                    pass
