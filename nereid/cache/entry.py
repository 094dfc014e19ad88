"""A cached response as bytes: the full key it answers, then its output tensors.

Layout: key length (8 bytes LE), key, header length (4 bytes LE), header (JSON: name, datatype, shape and
byte size of each output), then the outputs' raw bytes one after the other.
"""

from __future__ import annotations

import struct

import orjson

from nereid.datatypes import tensor_from_bytes, tensor_to_bytes
from nereid.errors import InternalError
from nereid.types import InferTensor


def encode_entry(key_material: bytes, outputs: list[InferTensor]) -> bytes:
    blobs = [tensor_to_bytes(t.data, t.datatype) for t in outputs]
    header = orjson.dumps(
        [[t.name, t.datatype, list(t.shape), len(b)] for t, b in zip(outputs, blobs, strict=True)]
    )
    return b"".join(
        [struct.pack("<Q", len(key_material)), key_material, struct.pack("<I", len(header)), header, *blobs]
    )


def decode_entry(entry: bytes, key_material: bytes) -> list[InferTensor] | None:
    """The outputs, or None when the entry answers another key (a digest collision)."""
    view = memoryview(entry)
    (key_length,) = struct.unpack_from("<Q", view, 0)
    if view[8 : 8 + key_length] != key_material:
        return None
    offset = 8 + key_length
    (header_length,) = struct.unpack_from("<I", view, offset)
    offset += 4
    try:
        header = orjson.loads(view[offset : offset + header_length])
    except orjson.JSONDecodeError as exc:
        raise InternalError(f"response cache: corrupt entry ({exc})") from None
    offset += header_length
    outputs = []
    for name, datatype, shape, nbytes in header:
        data = tensor_from_bytes(view[offset : offset + nbytes], datatype, tuple(shape), name, "", "")
        outputs.append(InferTensor(name, datatype, tuple(shape), data))
        offset += nbytes
    return outputs
