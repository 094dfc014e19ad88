"""The server-worker protocol in one process: frames, descriptors, arenas, tensor layout."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

from nereid.backends.python.worker import wire


def test_frames_split_anywhere_are_reassembled() -> None:
    frames = [wire.encode((wire.EXECUTE, i, 0, ("x" * i,))) for i in range(5)]
    stream = b"".join(frames)
    reader = wire.FrameReader()
    out: list[tuple[object, ...]] = []
    for start in range(0, len(stream), 7):  # 7-byte pieces cut frames and headers alike
        out.extend(reader.feed(stream[start : start + 7]))
    assert out == [(wire.EXECUTE, i, 0, ("x" * i,)) for i in range(5)]


def test_descriptors_travel_with_their_frame() -> None:
    server, worker = socket.socketpair()
    try:
        arena = wire.Arena.create(4096)
        arena.buffer[:5] = b"hello"
        wire.send(server, wire.encode(("first",)))
        wire.send(server, wire.encode(("second", 4096)), arena.fd)
        reader = wire.FrameReader()
        frames: list[tuple[object, ...]] = []
        while len(frames) < 2:
            received = wire.receive(worker, reader)
            assert received is not None
            frames.extend(received)
        assert frames == [("first",), ("second", 4096)]
        mapped = wire.Arena(reader.take_fd(), 4096)
        assert mapped.buffer[:5] == b"hello"
        with pytest.raises(RuntimeError, match="no file descriptor"):
            reader.take_fd()
        mapped.close()
        arena.close()
        server.close()
        assert wire.receive(worker, reader) is None  # end of stream
    finally:
        worker.close()


def test_tensors_round_trip_through_an_arena_that_grows() -> None:
    writer = wire.TensorWriter(4096)
    assert writer.finish() == 4096  # the first frame announces the arena
    small = np.arange(10, dtype=np.int16).reshape(2, 5)
    strided = np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2]  # not contiguous
    strings = np.array([[b"a", b"bc"], [b"", "d\xe9"]], dtype=np.object_)
    big = np.ones(5000, dtype=np.float32)  # 20 kB: beyond 4 kB
    big_endian = np.arange(3, dtype=">i4")
    descriptors = [
        writer.add("A", "INT16", small),
        writer.add("B", "FP64", strided),
        writer.add("C", "BYTES", strings),
        writer.add("D", "FP32", big),
        writer.add("E", "INT32", big_endian),
        writer.add("F", "BOOL", np.array([True, False])),
        writer.add("G", "FP32", np.zeros((0, 3), np.float32)),
    ]
    assert all(d[3] % wire.ALIGNMENT == 0 for d in descriptors)
    grown = writer.finish()
    assert grown >= 20000 and grown == writer.arena.size
    arena = writer.arena
    read = {d[0]: arena.array(d[1], d[2], d[3], d[4]) for d in descriptors}
    np.testing.assert_array_equal(read["A"], small)
    np.testing.assert_array_equal(read["B"], strided)
    assert read["C"].tolist() == [[b"a", b"bc"], [b"", "d\xe9".encode()]]
    np.testing.assert_array_equal(read["D"], big)
    assert read["E"].tolist() == [0, 1, 2]
    assert read["F"].tolist() == [True, False] and read["G"].shape == (0, 3)
    assert writer.finish() == 0  # nothing new to announce
    writer.arena.close()


def test_datatypes_of_numpy_dtypes() -> None:
    assert wire.datatype_of(np.dtype(np.float16)) == "FP16"
    assert wire.datatype_of(np.dtype(np.uint64)) == "UINT64"
    assert wire.datatype_of(np.dtype("S3")) == "BYTES"
    assert wire.datatype_of(np.dtype(np.complex64)) is None
    assert wire.datatype_of(np.dtype("U2")) is None


def test_arenas_are_anonymous() -> None:
    """memfd: no name under /dev/shm that could outlive the processes."""
    arena = wire.Arena.create(1 << 20)
    assert os.readlink(f"/proc/self/fd/{arena.fd}").startswith("/memfd:nereid-python-tensors")
    arena.close()


def _one_by_one(items: list[bytes]) -> bytes:
    return b"".join(len(item).to_bytes(4, "little") + item for item in items)


@pytest.mark.parametrize(
    "items",
    [
        [b"A"] * 1000,  # one length: laid out as records at once
        [b"\x00\x00", b"ab", b"\x00z"],  # one length, with zero bytes kept
        [b"ab", b"", b"xyz", b"q" * 300],
        [b"", b""],
        [],
    ],
)
def test_bytes_tensors_of_one_length_or_many_read_and_write_alike(items: list[bytes]) -> None:
    serialized = _one_by_one(items)
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    assert wire.serialize_bytes(array) == serialized
    assert wire.deserialize_bytes(serialized).tolist() == items
    # a count reads that many elements of a longer buffer (an arena), as bytes
    arena = np.frombuffer(serialized + b"\x07\x00\x00\x00", dtype=np.uint8)
    assert wire.deserialize_bytes(memoryview(arena), len(items)).tolist() == items


def test_a_bytes_tensor_cut_short_is_refused() -> None:
    with pytest.raises(ValueError, match="ends inside an element"):
        wire.deserialize_bytes(_one_by_one([b"ab", b"cd"])[:-1])
