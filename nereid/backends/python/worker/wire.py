"""What the server and a Python-model worker exchange: frames on a socket, tensors in shared memory.

Runs on both sides, and the worker side may be another Python (EXECUTION_ENV_PATH), so this module needs
only the standard library and numpy, and Python 3.8.

Control frames are a 4-byte little-endian length and a pickled tuple of builtins (strings, numbers, tuples,
dicts): small, whatever the tensor sizes. Tensor data travels in two arenas per worker, anonymous shared
memory (memfd) that only its writer writes: the server writes request inputs into its arena, the worker
writes response outputs into its own. A tensor crosses as a descriptor `(name, datatype, shape, offset,
nbytes)` into the writer's arena. The writer grows its arena when a frame needs more room and passes the
new file descriptor along with that frame (SCM_RIGHTS), so no shared memory has a name that could outlive
the processes: the kernel frees it when both sides have closed it.

Up to PIPELINE_DEPTH executions are in flight per worker: while the worker runs one, the next one waits
in its socket, so a busy worker goes from one to the next without sleeping. Each direction has an arena
per slot; the server gives each execution the lowest slot that no execution in flight holds, and the
worker answers in that slot. A slot is given again only once the server has read the answer of the
execution that held it: so neither side overwrites a slot the other still reads. Slots beyond
PIPELINE_DEPTH are made when needed: a worker waiting in a BLS call runs a later execution meanwhile
(see channel.py), so answers may come out of order and more executions be in flight.
"""

from __future__ import annotations

import array
import os
import pickle
import socket
import struct
import tempfile
from collections import deque
from typing import Any, Sequence, Tuple

import numpy as np

# Frame kinds, server -> worker
INIT = "init"  # (INIT, model_file, args: dict, arena_size, busy_wait_us) -> READY | ERROR
AUTO_COMPLETE = "auto_complete"  # (AUTO_COMPLETE, model_file, config_json: str) -> CONFIG | ERROR
# (EXECUTE, seq, slot, new_arena_size, requests, poll_after) -> RESULT | FAILED; seq counts 0, 1, ...;
# poll_after: sent with no other execution ahead of it, so the worker may poll for the next (see stub._next)
EXECUTE = "execute"
IS_READY = "is_ready"  # (IS_READY, seq) -> READY_STATE
FINALIZE = "finalize"  # (FINALIZE,) -> FINALIZED, then the worker exits
CANCEL = "cancel"  # (CANCEL, stream_id): the client of a decoupled model's request went away
BLS_RESPONSE = "bls_response"  # (BLS_RESPONSE, call_id, final: bool, result or None): answers BLS
CONTROL_DONE = "control_done"  # (CONTROL_DONE, call_id, ok: bool, value or error message)
# worker -> server
READY = "ready"  # (READY, has_is_ready: bool)
ERROR = "error"  # (ERROR, message): initialize or auto-complete failed
CONFIG = "config"  # (CONFIG, config_json)
RESULT = "result"  # (RESULT, seq, slot, new_arena_size, results): one result per request, in order
FAILED = "failed"  # (FAILED, seq, message): execute raised or answered wrongly; every request fails
READY_STATE = "ready_state"  # (READY_STATE, seq, ready: bool, message)
FINALIZED = "finalized"  # (FINALIZED, error message or "")
LOG = "log"  # (LOG, level, message): pb_utils.Logger, forwarded to the server's log
# At any time, from any thread of the model:
RESPONSE = "response"  # (RESPONSE, stream_id, final: bool, result or None): a decoupled model's response
BLS = "bls"  # (BLS, call_id, model_name, model_version, decoupled, request): an inference request
CONTROL = "control"  # (CONTROL, call_id, action, model_name, argument): load, unload or is_ready
# (METRIC, call_id, operation, args): a custom metric operation (pb_utils.MetricFamily, Metric), answered
# with CONTROL_DONE; call_id 0 asks for no answer (releases of garbage-collected families).
METRIC = "metric"

# A request inside EXECUTE: (id, correlation_id, flags, parameters_json, timeout_us, output_names, inputs,
# stream_id); stream_id is 0 unless the model is decoupled, when it names the request in RESPONSE frames.
# A result inside RESULT: (True, outputs, parameters_json) or (False, status_name, message)
# `inputs` and `outputs` are tuples of tensor descriptors. For a decoupled model, RESULT only says that
# execute returned (its results carry no outputs); the responses come in RESPONSE frames.
# RESPONSE, BLS and BLS_RESPONSE carry their tensors inline instead (InlineTensor), since they may come at
# any time and from any thread, outside the pipeline slots that arenas are reserved by; a request inside
# BLS is shaped as in EXECUTE, without stream_id.
TensorDescriptor = Tuple[str, str, Tuple[int, ...], int, int]
InlineTensor = Tuple[str, str, Tuple[int, ...], bytes]

PIPELINE_DEPTH = 2
ALIGNMENT = 64
_HEADER = struct.Struct("<I")
_MAX_FDS = 4

# Wire datatype -> numpy dtype. nereid.datatypes has the same table, but the worker cannot import it (it
# needs ml_dtypes, absent from most model environments), hence this copy without BF16.
NUMPY_TYPES: dict[str, Any] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}
_BY_KIND = {(dt.kind, dt.itemsize): name for name, dt in NUMPY_TYPES.items() if name != "BYTES"}


def bfloat16() -> np.dtype | None:
    """numpy has no bfloat16; ml_dtypes provides one where it is installed."""
    try:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


def datatype_of(dtype: np.dtype) -> str | None:
    """The wire datatype of a numpy dtype, or None when there is none."""
    if dtype.kind in ("O", "S"):
        return "BYTES"
    if dtype.kind == "V" and dtype.itemsize == 2 and dtype.name == "bfloat16":
        return "BF16"
    return _BY_KIND.get((dtype.kind, dtype.itemsize))


# BYTES tensors: each element is a 4-byte little-endian length and the bytes, row-major.
def serialize_bytes(array_: np.ndarray) -> bytes:
    items = array_.reshape(-1).tolist()
    if not set(map(type, items)) <= {bytes}:
        items = [_as_bytes(item) for item in items]
    return pack_bytes(items)


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    return str(item).encode("utf-8")


def pack_bytes(items: Sequence[bytes]) -> bytes:
    """`items` serialized as a BYTES tensor. Elements of one length (the common case: millions of them
    cost seconds element by element) are laid out as records in one numpy operation."""
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    size = int(lengths[0]) if len(items) else 0
    if size and (lengths == size).all():
        records = np.empty(len(items), dtype=[("length", "<u4"), ("data", f"V{size}")])
        records["length"] = size
        records["data"] = np.frombuffer(b"".join(items), dtype=f"V{size}")
        return records.tobytes()
    parts: list[bytes] = [b""] * (2 * len(items))
    parts[0::2] = map(_HEADER.pack, lengths.tolist())
    parts[1::2] = items
    return b"".join(parts)


def _uniform_elements(view: memoryview, count: int) -> np.ndarray | None:
    """The elements, when the buffer holds elements of one length only (else None, to read one by one)."""
    end = len(view)
    if end < 4:
        return None
    (size,) = _HEADER.unpack_from(view, 0)
    stride = 4 + size
    if size == 0 or (count < 0 and end % stride) or (count >= 0 and count * stride > end):
        return None
    records = np.frombuffer(
        view, dtype=[("length", "<u4"), ("data", f"V{size}")], count=end // stride if count < 0 else count
    )
    if not (records["length"] == size).all():
        return None
    result = np.empty(len(records), dtype=np.object_)
    result[:] = records["data"].tolist()
    return result


def deserialize_bytes(buffer: Any, count: int = -1) -> np.ndarray:
    """Elements of a serialized BYTES tensor as a 1-D object array (all of them when count is -1)."""
    view = memoryview(buffer).cast("B")
    uniform = _uniform_elements(view, count)
    if uniform is not None:
        return uniform
    end = len(view)
    items: list[bytes] = []
    unpack = _HEADER.unpack_from
    position = 0
    while position < end and count != len(items):
        if position + 4 > end:
            raise ValueError("serialized BYTES tensor ends inside an element's length")
        (length,) = unpack(view, position)
        position += 4
        if position + length > end:
            raise ValueError("serialized BYTES tensor ends inside an element")
        items.append(bytes(view[position : position + length]))
        position += length
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


def inline_tensor(name: str, datatype: str, data: np.ndarray) -> InlineTensor:
    if datatype == "BYTES":
        return (name, datatype, tuple(data.shape), serialize_bytes(data))
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return (name, datatype, tuple(data.shape), np.ascontiguousarray(data).tobytes())


def inline_array(datatype: str, shape: Sequence[int], payload: bytes) -> np.ndarray:
    """The array of an InlineTensor (writable: it owns its bytes)."""
    if datatype == "BYTES":
        count = 1
        for d in shape:
            count *= d
        return deserialize_bytes(payload, count).reshape(shape)
    dtype = NUMPY_TYPES.get(datatype) or (bfloat16() if datatype == "BF16" else None) or np.dtype("<u2")
    return np.frombuffer(bytearray(payload), dtype).reshape(shape)


class Arena:
    """Anonymous shared memory that one side writes and the other reads."""

    def __init__(self, fd: int, size: int) -> None:
        import mmap

        self.fd = fd
        self.size = size
        self.buffer = mmap.mmap(fd, size)

    @classmethod
    def create(cls, size: int) -> Arena:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("nereid-python-tensors", getattr(os, "MFD_CLOEXEC", 0))
        else:  # no memfd (not Linux): an unlinked temporary file is as anonymous
            handle = tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            fd = os.dup(handle.fileno())
            handle.close()
        os.ftruncate(fd, size)
        return cls(fd, size)

    def close(self) -> None:
        try:
            self.buffer.close()
        except BufferError:  # arrays still view it (a model kept an input): the mapping goes with them
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def array(self, datatype: str, shape: Sequence[int], offset: int, nbytes: int) -> np.ndarray:
        """A view of a tensor in the arena (BYTES: a new object array)."""
        dtype = NUMPY_TYPES.get(datatype)
        if dtype is not None and datatype != "BYTES":
            return np.frombuffer(self.buffer, dtype, nbytes // dtype.itemsize, offset).reshape(shape)
        if datatype == "BYTES":
            count = 1
            for d in shape:
                count *= d
            return deserialize_bytes(memoryview(self.buffer)[offset : offset + nbytes], count).reshape(shape)
        dtype = bfloat16() if datatype == "BF16" else None
        if dtype is None:
            dtype = np.dtype("<u2")  # BF16 without ml_dtypes: the raw 16-bit values
        return np.frombuffer(self.buffer, dtype, nbytes // dtype.itemsize, offset).reshape(shape)


class TensorWriter:
    """Lays out the tensors of one frame in an arena, growing it (a new one) when they do not fit."""

    def __init__(self, size: int) -> None:
        self.arena = Arena.create(size)
        self.new_size = size  # sent with the next frame so the peer maps the arena; 0 once it has
        self._offset = 0
        self._pending: list[tuple[int, int, Any]] = []  # (offset, nbytes, data)

    def reset(self) -> None:
        self._offset = 0
        self._pending = []

    def add(self, name: str, datatype: str, data: np.ndarray) -> TensorDescriptor:
        """Reserve room for a tensor; `finish` copies it in."""
        if datatype == "BYTES":
            payload: Any = serialize_bytes(data)
            nbytes = len(payload)
        else:
            if not data.flags.c_contiguous:
                data = np.ascontiguousarray(data)
            if data.dtype.byteorder == ">":  # the wire is little-endian
                data = data.astype(data.dtype.newbyteorder("<"))
            nbytes = data.nbytes
            # numpy exports a C-contiguous array as plain bytes, except for dtypes without a buffer format
            payload = data.view(np.uint8) if data.dtype.kind == "V" else data
        offset = self._offset
        self._offset = offset + ((nbytes + ALIGNMENT - 1) & -ALIGNMENT)
        if nbytes:
            self._pending.append((offset, nbytes, payload))
        return (name, datatype, data.shape, offset, nbytes)

    def finish(self) -> int:
        """Copy the reserved tensors in; returns the arena's size when the peer must map it anew, else 0."""
        if self._offset > self.arena.size:
            size = self.arena.size
            while size < self._offset:
                size *= 2
            self.arena.close()
            self.arena = Arena.create(size)
            self.new_size = size
        buffer = self.arena.buffer
        for offset, nbytes, payload in self._pending:
            buffer[offset : offset + nbytes] = payload
        self._pending = []
        self._offset = 0
        new_size, self.new_size = self.new_size, 0
        return new_size


def encode(message: tuple) -> bytes:
    body = pickle.dumps(message, 4)
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Reassembles frames from what a stream socket delivers, with the descriptors passed alongside."""

    def __init__(self) -> None:
        self._partial = b""  # the start of a frame whose end has not come yet
        self.fds: deque[int] = deque()

    def feed(self, data: bytes, ancillary: Sequence[tuple[int, int, bytes]] = ()) -> list[tuple]:
        """The frames completed by `data`; descriptors go to `fds`, in the order they came."""
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self.fds.extend(fds)
        if self._partial:
            data = self._partial + data
            self._partial = b""
        frames = []
        view = memoryview(data)
        start = 0
        end = len(data)
        while end - start >= 4:
            (length,) = _HEADER.unpack_from(data, start)
            stop = start + 4 + length
            if stop > end:
                break
            frames.append(pickle.loads(view[start + 4 : stop]))
            start = stop
        if start < end:
            self._partial = bytes(view[start:])
        return frames

    def take_fd(self) -> int:
        if not self.fds:
            raise RuntimeError("a frame announced a shared-memory arena but no file descriptor came with it")
        return self.fds.popleft()

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.popleft())


_ANCILLARY_SPACE = socket.CMSG_SPACE(_MAX_FDS * 4)


def receive(sock: socket.socket, reader: FrameReader, flags: int = 0) -> list[tuple] | None:
    """The frames one read from the socket completes (maybe none); None at end of stream."""
    data, ancillary, _flags, _address = sock.recvmsg(1 << 16, _ANCILLARY_SPACE, flags)
    if not data:
        return None
    return reader.feed(data, ancillary)


def send(sock: socket.socket, frame: bytes, fd: int = -1) -> None:
    """Send a whole frame (blocking socket), with a file descriptor riding along when fd >= 0."""
    if fd >= 0:
        sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        if sent < len(frame):
            sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)
