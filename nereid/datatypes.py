"""Tensor data types: wire names ("FP32"), config names (TYPE_FP32), numpy dtypes, BYTES encoding."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np

from nereid.errors import InputDataError, InvalidArgument

# Wire datatype -> numpy dtype (little-endian, as the binary tensor extension requires).
_NUMPY: dict[str, np.dtype] = {
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
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.dtype(np.object_),
}

WIRE_DATATYPES = frozenset(_NUMPY)

_BY_KIND: dict[tuple[str, int], str] = {
    (dt.kind, dt.itemsize): name for name, dt in _NUMPY.items() if name not in ("BYTES", "BF16")
}


def config_to_wire(type_name: str) -> str:
    """TYPE_FP32 -> FP32; TYPE_STRING -> BYTES."""
    name = type_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def numpy_dtype(datatype: str) -> np.dtype:
    try:
        return _NUMPY[datatype]
    except KeyError:
        raise InvalidArgument(f"invalid datatype '{datatype}'") from None


def wire_datatype(dtype: np.dtype) -> str:
    """The wire datatype of a numpy dtype (object/bytes/str arrays are BYTES)."""
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if dtype == _NUMPY["BF16"]:
        return "BF16"
    try:
        return _BY_KIND[(dtype.kind, dtype.itemsize)]
    except KeyError:
        raise InvalidArgument(f"unsupported numpy dtype {dtype}") from None


def element_size(datatype: str) -> int:
    """Bytes per element; 0 for BYTES, whose elements vary in size."""
    return 0 if datatype == "BYTES" else _NUMPY[datatype].itemsize


def deserialize_bytes(
    buffer: bytes | memoryview, count: int, tensor: str, model: str = "", prefix: str = ""
) -> np.ndarray:
    """Decode the length-prefixed (4-byte LE) elements of a buffer: exactly `count` of them, with Triton's
    errors (it reads the whole buffer, then compares counts). `prefix` is the request's "[request id: ..] "."""
    view = memoryview(buffer)
    end = len(view)
    of_model = f" for model '{model}'" if model else ""
    items: list[bytes] = []  # at most end // 4 of them: each element has its 4-byte length
    pos = 0
    while pos < end:
        if pos + 4 > end:
            raise InputDataError(
                f"{prefix}incomplete string length indicator for inference input '{tensor}'{of_model}, expecting "
                f"4 bytes but only {end - pos} bytes available. Please make sure the string length indicator is "
                "in one buffer."
            )
        if len(items) == count:  # Triton stops at the first element past the shape
            check_string_count(count + 1, count, tensor, model, prefix)
        (length,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if pos + length > end:
            raise InputDataError(
                f"incomplete string data for inference input '{tensor}', expecting string of length {length} "
                f"but only {end - pos} bytes available"
            )
        items.append(bytes(view[pos : pos + length]))
        pos += length
    check_string_count(len(items), count, tensor, model, prefix)
    out = np.empty(count, dtype=np.object_)
    out[:] = items
    return out


def check_string_count(found: int, count: int, tensor: str, model: str, prefix: str) -> None:
    """A BYTES input must hold as many elements as its shape: Triton's two texts for too few, too many.
    Too many is reported as one past the shape, the element at which Triton stops counting."""
    of_model = f" for model '{model}'" if model else ""
    if found < count:
        raise InputDataError(
            f"{prefix}expected {count} string elements for inference input '{tensor}'{of_model}, got {found}"
        )
    if found > count:
        raise InputDataError(
            f"{prefix}unexpected number of string elements {count + 1} for inference input '{tensor}'"
            f"{of_model}, expecting {count}"
        )


def serialize_bytes(array: np.ndarray) -> bytes:
    """Encode a BYTES tensor as length-prefixed elements, row-major."""
    # The Python-model worker's encoder, since the worker cannot import this module (imported here, not at
    # the top: its package pulls in the Python backend, which imports this module).
    from nereid.backends.python.worker import wire

    return wire.serialize_bytes(array)


def tensor_to_bytes(array: np.ndarray, datatype: str) -> bytes:
    """Raw little-endian row-major bytes of a tensor, as on the wire."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array, dtype=_NUMPY[datatype]).tobytes()


def size_mismatch(prefix: str, name: str, model_name: str, expected: int, got: int) -> InputDataError:
    """An input whose data is not the size its shape and datatype make, in Triton's words."""
    return InputDataError(
        f"{prefix}input byte size mismatch for input '{name}' for model '{model_name}'. Expected {expected}, "
        f"got {got}"
    )


def tensor_from_bytes(
    buffer: bytes | memoryview, datatype: str, shape: tuple[int, ...], name: str, model_name: str, prefix: str
) -> np.ndarray:
    """A tensor from its raw little-endian bytes (length-prefixed elements for BYTES), size checked."""
    count = math.prod(shape)
    if datatype == "BYTES":
        return deserialize_bytes(buffer, count, name, model_name, prefix).reshape(shape)
    expected = count * element_size(datatype)
    if len(buffer) != expected:
        raise size_mismatch(prefix, name, model_name, expected, len(buffer))
    # zero copy: the array is a view on the request body
    return np.frombuffer(buffer, dtype=numpy_dtype(datatype)).reshape(shape)
