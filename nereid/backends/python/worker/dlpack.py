"""Tensors a model hands over by DLPack from a GPU (torch, CuPy, JAX): where they live, and their host copy.

Nereid's tensors travel in host memory, so a GPU tensor given to `pb_utils.Tensor.from_dlpack` is copied
to the host once, there; the GPU tensor itself is kept for the model's own DLPack consumers, as Triton
keeps it."""

from __future__ import annotations

import ctypes
import importlib
from typing import Any

import numpy as np

from .errors import TritonModelException

CPU, CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA (numpy reads every other host kind itself)

# PyCapsule_GetPointer and PyCapsule_IsValid, typed once
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = (ctypes.py_object, ctypes.c_char_p)


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLTensorHead(ctypes.Structure):
    """The first members of DLTensor, which begins DLManagedTensor (the unversioned capsule's pointer)."""

    _fields_ = (("data", ctypes.c_void_p), ("device", _DLDevice))


def is_capsule(value: Any) -> bool:
    return type(value).__name__ == "PyCapsule"


def capsule_device(capsule: Any) -> tuple[int, int] | None:
    """(device type, device id) of an unconsumed "dltensor" capsule; None for any other capsule."""
    if not _is_valid(capsule, b"dltensor"):
        return None
    head = _DLTensorHead.from_address(_get_pointer(capsule, b"dltensor"))
    return head.device.device_type, head.device.device_id


def import_capsule(name: str, capsule: Any) -> Any:
    """A GPU capsule as a tensor of the framework that can take it (torch, else CuPy), so that it can be
    read and exported again; a capsule can be consumed only once."""
    for module_name in ("torch", "cupy"):
        try:
            module = importlib.import_module(module_name)  # the one loaded already, most often
        except ImportError:
            continue
        return module.from_dlpack(capsule)
    raise TritonModelException(
        f"tensor '{name}': a DLPack capsule on a GPU needs torch or CuPy in the model's environment to be read"
    )


def host_copy(name: str, tensor: Any) -> np.ndarray:
    """A host array holding a GPU tensor's values (synchronised with the work that wrote them)."""
    try:  # producers of DLPack 1.0 copy to the device asked for themselves
        return np.from_dlpack(tensor, device="cpu", copy=True)
    except (TypeError, ValueError, BufferError, NotImplementedError, RuntimeError):
        pass  # an older producer, which copies by its own method below
    if hasattr(tensor, "cpu"):  # torch
        host = tensor.cpu()
    elif hasattr(tensor, "get"):  # CuPy
        host = tensor.get()
    elif hasattr(tensor, "__array__"):  # JAX, and others that copy to a numpy array
        host = np.asarray(tensor)
    else:
        host = tensor
    try:
        return host if isinstance(host, np.ndarray) else np.from_dlpack(host)
    except (TypeError, BufferError) as exc:
        raise TritonModelException(
            f"tensor '{name}': cannot copy the GPU tensor to host memory: {exc}"
        ) from None
