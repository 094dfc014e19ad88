"""The shared memory registry: registration rules, bounds on every read and write, refusals."""

from __future__ import annotations

import base64
import importlib.util
import os
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from nereid import shared_memory
from nereid.errors import AlreadyExists, InternalError, InvalidArgument, NotFound, Unavailable, Unsupported
from nereid.gpus import visible_gpu_count
from nereid.shared_memory import SharedMemoryRef, SharedMemoryRegistry, check_outputs_fit


@pytest.fixture
def region() -> Iterator[tuple[str, object]]:
    key = f"/nereid_test_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("r", key, 64)
    shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.int32)])
    yield key, handle
    shm.destroy_shared_memory_region(handle)


def test_register_view_write_status_unregister(region: tuple[str, object]) -> None:
    key, handle = region
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 16, 48)
    assert registry.system_status() == [{"name": "r", "key": key, "offset": 16, "byte_size": 48}]
    view = registry.view(SharedMemoryRef("r", 0, 16))  # offsets are relative to the registered start
    assert np.frombuffer(view, np.int32).tolist() == [4, 5, 6, 7]
    registry.write(SharedMemoryRef("r", 16, 8), "OUT", np.array([-1, -2], np.int32).tobytes())
    assert shm.get_contents_as_numpy(handle, np.int32, [16])[8:10].tolist() == [-1, -2]
    with pytest.raises(AlreadyExists, match="already in manager"):
        registry.register_system("r", key, 0, 16)
    registry.unregister_system("r")
    registry.unregister_system("r")  # twice, or unknown: not an error
    assert registry.system_status() == []
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'r'"):
        registry.system_status("r")


@pytest.mark.parametrize("key", ["/../../etc/passwd", "/a/b", "/.."])
def test_keys_that_cannot_be_opened(key: str) -> None:
    with pytest.raises(InvalidArgument, match="Unable to open shared memory region"):
        SharedMemoryRegistry().register_system("x", key, 0, 16)


def test_a_key_with_no_object_is_an_internal_error_as_in_triton() -> None:
    with pytest.raises(InternalError, match="^Unable to open shared memory region: '/nereid_no_such_region'"):
        SharedMemoryRegistry().register_system("x", "/nereid_no_such_region", 0, 16)


@pytest.mark.parametrize("key", ["", "/", "///"])
def test_keys_of_slashes_alone_are_invalid(key: str) -> None:
    with pytest.raises(
        InvalidArgument, match=f"^cannot register shared memory region 'x' - invalid shm key '{key}'$"
    ):
        SharedMemoryRegistry().register_system("x", key, 0, 16)


@pytest.mark.parametrize(
    "key", ["triton_python_backend_shm_region_a", "///triton_python_backend_shm_region_a"]
)
def test_the_python_backends_prefix_is_reserved(key: str) -> None:
    with pytest.raises(
        InvalidArgument, match="as the key contains the reserved prefix 'triton_python_backend_shm_region_'"
    ):
        SharedMemoryRegistry().register_system("x", key, 0, 16)


def test_spans_are_checked_in_tritons_order(region: tuple[str, object]) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", region[0], 0, 64)
    with pytest.raises(InvalidArgument, match="^Invalid offset for shared memory region: 'r'$"):
        registry.view(SharedMemoryRef("r", -32, 4))  # 2**64 - 32 as a signed value
    with pytest.raises(
        InvalidArgument, match=r"^Integer overflow detected: byte_size \(18446744073709551584\)"
    ):
        registry.view(SharedMemoryRef("r", 32, 2**64 - 32))


def test_a_link_in_dev_shm_is_not_followed(tmp_path: object) -> None:
    name = f"nereid_link_{uuid.uuid4().hex[:8]}"
    os.symlink("/etc/hostname", f"/dev/shm/{name}")
    try:
        with pytest.raises(InternalError, match="Unable to open"):
            SharedMemoryRegistry().register_system("x", "/" + name, 0, 4)
    finally:
        os.unlink(f"/dev/shm/{name}")


@pytest.mark.parametrize("offset, size", [(0, 65), (60, 8), (64, 1), (0, 0)])
def test_registration_must_fit_the_object(region: tuple[str, object], offset: int, size: int) -> None:
    with pytest.raises(InvalidArgument, match="invalid args"):
        SharedMemoryRegistry().register_system("x", region[0], offset, size)


@pytest.mark.parametrize(
    "ref", [SharedMemoryRef("r", 0, 65), SharedMemoryRef("r", 60, 8), SharedMemoryRef("r", 0, 0)]
)
def test_reads_stay_inside_the_region(region: tuple[str, object], ref: SharedMemoryRef) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", region[0], 0, 64)
    with pytest.raises(InvalidArgument, match="Invalid offset \\+ byte size for shared memory region: 'r'"):
        registry.view(ref)
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'other'"):
        registry.view(SharedMemoryRef("other", 0, 4))


def test_outputs_must_fit_and_not_overlap(region: tuple[str, object]) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", region[0], 0, 64)
    with pytest.raises(InvalidArgument, match="should be at least 64 bytes"):
        registry.write(SharedMemoryRef("r", 0, 16), "OUTPUT0", bytes(64))
    with pytest.raises(InvalidArgument, match="outputs 'A' and 'B' overlap"):
        check_outputs_fit(registry, {"A": SharedMemoryRef("r", 0, 32), "B": SharedMemoryRef("r", 16, 32)})
    check_outputs_fit(registry, {"A": SharedMemoryRef("r", 0, 32), "B": SharedMemoryRef("r", 32, 32)})


def test_unregistered_while_in_use_keeps_the_request_safe(region: tuple[str, object]) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", region[0], 0, 64)
    array = np.frombuffer(registry.view(SharedMemoryRef("r", 0, 64)), np.int32)
    registry.unregister_system()
    assert array.tolist() == list(range(16))  # the mapping outlives the registration
    with pytest.raises(NotFound):
        registry.view(SharedMemoryRef("r", 0, 64))


def test_unregistering_a_region_in_use_waits_for_its_last_request(region: tuple[str, object]) -> None:
    registry = SharedMemoryRegistry()
    registry.register_system("r", region[0], 0, 64)
    first = registry.acquire(["r", "r", "unknown"])
    assert first == ("r",)
    registry.unregister_system()  # not an error; the region stays while in use
    assert [s["name"] for s in registry.system_status()] == ["r"]
    second = registry.acquire(["r"])  # a request admitted meanwhile may still use it
    assert registry.view(SharedMemoryRef("r", 0, 4)).nbytes == 4
    registry.release(first)
    assert [s["name"] for s in registry.system_status()] == ["r"]
    registry.release(second)  # the last user is done: gone without another call
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'r'"):
        registry.system_status("r")
    registry.release(second)  # releasing again is harmless


def test_a_region_shrunk_by_its_client_is_refused(region: tuple[str, object]) -> None:
    key, _ = region
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    os.truncate(f"/dev/shm{key}", 16)
    with pytest.raises(InvalidArgument, match="shrank to 16 bytes"):
        registry.view(SharedMemoryRef("r", 0, 64))


def test_a_shrink_is_noticed_once_the_size_is_read_again(
    region: tuple[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is read once per check period, not per tensor: a shrink after a read is noticed when the
    period is over."""
    key, _ = region
    now = [0]
    monkeypatch.setattr(shared_memory, "time", SimpleNamespace(monotonic_ns=lambda: now[0]))
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    assert registry.view(SharedMemoryRef("r", 0, 64)).nbytes == 64
    os.truncate(f"/dev/shm{key}", 16)
    now[0] += shared_memory._SIZE_CHECK_NS
    with pytest.raises(InvalidArgument, match="shrank to 16 bytes"):
        registry.view(SharedMemoryRef("r", 0, 64))
    registry.unregister_system("r")
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'r'"):
        registry.view(SharedMemoryRef("r", 0, 4))


def test_disabled_and_cuda_without_a_gpu() -> None:
    disabled = SharedMemoryRegistry(allowed=False)
    with pytest.raises(Unsupported, match=r"^Client shared memory is disabled. Start the server with"):
        disabled.register_system("x", "/k", 0, 4)
    with pytest.raises(Unsupported, match="--allow-client-shm=true"):
        disabled.unregister_system("x")
    assert disabled.system_status() == []  # status stays allowed
    disabled.close()
    registry = SharedMemoryRegistry()
    assert registry.cuda_status() == []
    with pytest.raises(InvalidArgument, match="valid base64 encoded cudaIpcMemHandle_t"):
        registry.register_cuda("c", "AAAA", 0, 16)
    with pytest.raises(InvalidArgument, match="valid base64 encoded cudaIpcMemHandle_t"):
        registry.register_cuda("c", "not base64!", 0, 16)
    handle = base64.b64encode(bytes(64)).decode()
    # as C++ clients send it: wrapped every 72 characters, with a line break at the end
    wrapped = handle[:72] + "\n" + handle[72:] + "\n"
    if importlib.util.find_spec("cupy") is None:
        for text in (handle, wrapped):
            with pytest.raises(Unavailable, match=r"needs a GPU host with nereid\[cuda\] \(CuPy\) installed"):
                registry.register_cuda("c", text, 0, 16)
    assert registry.cuda_status() == []


def test_system_and_cuda_regions_share_one_namespace(region: tuple[str, object]) -> None:
    key, _ = region
    registry = SharedMemoryRegistry()
    registry.register_system("r", key, 0, 64)
    # refused before the handle is opened, so this holds with or without a GPU
    with pytest.raises(AlreadyExists, match="'r' already in manager"):
        registry.register_cuda("r", base64.b64encode(bytes(64)).decode(), 0, 16)
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'r'"):
        registry.cuda_status("r")
    registry.unregister_cuda("r")  # a region of the other kind is left alone
    assert [r["name"] for r in registry.system_status()] == ["r"]
    with pytest.raises(InvalidArgument, match="invalid args"):
        registry.register_cuda("c", base64.b64encode(bytes(64)).decode(), 0, 0)
    registry.close()
    assert registry.system_status() == []


@pytest.mark.skipif(
    importlib.util.find_spec("cupy") is None or visible_gpu_count() == 0,
    reason="needs a CUDA device and nereid[cuda] (CuPy)",
)
def test_cuda_handles_that_cannot_be_opened_are_refused() -> None:
    registry = SharedMemoryRegistry()
    zeros = base64.b64encode(bytes(64)).decode()
    with pytest.raises(InvalidArgument, match="device 99 does not exist"):
        registry.register_cuda("c", zeros, 99, 16)
    with pytest.raises(InvalidArgument, match="failed to open CUDA IPC handle"):
        registry.register_cuda("c", zeros, 0, 16)
    assert registry.cuda_status() == []
