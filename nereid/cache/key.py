"""What identifies a cacheable response: the model version, every input and the outputs asked for.

The digest (BLAKE2b, 128 bits) indexes the cache; the full key travels with the entry and a hit is
confirmed against it, so two requests whose digests collide never share a response (Triton trusts a 64-bit
hash alone).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from nereid.datatypes import tensor_to_bytes


@dataclass(frozen=True, slots=True)
class CacheKey:
    digest: bytes  # 16 bytes
    material: bytes  # everything the digest was computed from


def cache_key(
    model: str,
    version: str,
    inputs: Mapping[str, tuple[str, np.ndarray]],
    outputs: Sequence[tuple[str, int]],
) -> CacheKey:
    """`inputs`: name -> (wire datatype, array as received); `outputs`: (name, classification count) of
    each output asked for, in the order asked."""
    parts = [_text(model), _text(version), struct.pack("<I", len(inputs))]
    for name in sorted(inputs):
        datatype, array = inputs[name]
        data = tensor_to_bytes(array, datatype)
        parts += [
            _text(name),
            _text(datatype),
            struct.pack(f"<I{array.ndim}q", array.ndim, *array.shape),
            struct.pack("<Q", len(data)),
            data,
        ]
    parts.append(struct.pack("<I", len(outputs)))
    for name, class_count in outputs:
        parts += [_text(name), struct.pack("<I", class_count)]
    material = b"".join(parts)
    return CacheKey(hashlib.blake2b(material, digest_size=16).digest(), material)


def _text(value: str) -> bytes:
    encoded = value.encode()
    return struct.pack("<I", len(encoded)) + encoded
