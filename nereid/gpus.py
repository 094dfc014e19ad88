"""The CUDA devices this process sees, asked of the driver itself, so no framework need be imported."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def visible_gpu_count() -> int:
    """How many CUDA devices the driver shows (CUDA_VISIBLE_DEVICES applies); 0 without a driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value
