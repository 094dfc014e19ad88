"""Triton's classification extension: the top-k entries of an output as "value:index[:label]" strings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nereid.datatypes import wire_datatype
from nereid.errors import InvalidArgument

# Triton refuses to rank more elements than this per batch row.
MAX_CLASSIFICATION_ELEMENTS = 1_000_000


def classify(array: np.ndarray, count: int, labels: Sequence[str], batched: bool, name: str) -> np.ndarray:
    """Top `count` classes per batch row (all of the row when it has fewer), highest first. As in Triton,
    only FP32, FP64 and integer outputs can be ranked."""
    if array.dtype.kind not in "iu" and array.dtype not in (np.float32, np.float64):
        raise InvalidArgument(
            "class result not available for output due to unsupported type "
            f"'{wire_datatype(array.dtype)}' (output '{name}')"
        )
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    if rows.shape[1] > MAX_CLASSIFICATION_ELEMENTS:
        raise InvalidArgument(
            f"classification output tensor too large: output '{name}' has {rows.shape[1]} elements per "
            f"batch row, more than {MAX_CLASSIFICATION_ELEMENTS}"
        )
    k = min(count, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows):
        # stable sort keeps the lower index first among equal values
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            text = f"{_format(row[index])}:{index}"
            if index < len(labels):
                text += f":{labels[index]}"
            result[r, c] = text.encode("utf-8")
    return result if batched else result.reshape(k)


def _format(value: np.generic) -> str:
    """C++ std::to_string formatting, which Triton uses: 6 decimals for floats."""
    if isinstance(value, (np.floating, float)):
        return f"{float(value):.6f}"
    if isinstance(value, (np.bool_, bool)):
        return str(int(value))
    return str(value)
