"""The CUDA devices this process sees, asked of the driver itself, so no framework need be imported."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _driver() -> ctypes.CDLL | None:
    """libcuda, initialised; None without a driver or a device it can start."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return driver if driver.cuInit(0) == 0 else None


@functools.cache
def visible_gpu_count() -> int:
    """How many CUDA devices the driver shows (CUDA_VISIBLE_DEVICES applies); 0 without a driver."""
    driver = _driver()
    count = ctypes.c_int(0)
    if driver is None or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def pci_bus_ids() -> list[str]:
    """The visible devices' PCI bus ids ("0000:1A:00.0"), in CUDA's order: how NVML, which lists every
    device whatever CUDA_VISIBLE_DEVICES says, is matched to the ones this process uses."""
    driver = _driver()
    ids = []
    for ordinal in range(visible_gpu_count()):
        device = ctypes.c_int(0)
        text = ctypes.create_string_buffer(64)
        if driver is None or driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        if driver.cuDeviceGetPCIBusId(text, len(text), device) == 0:
            ids.append(text.value.decode())
    return ids
