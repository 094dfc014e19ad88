"""Ragged batching: the `batch_input` tensors a model asks for, computed from the requests of one batch,
and ragged inputs flattened into one row (Triton's ragged batching).

Pure functions of the requests, so whoever forms a batch (the backend for one execution, or a batcher
that joins requests of different shapes) gets the same tensors. Kinds, per Triton's model configuration:

- BATCH_ELEMENT_COUNT: [n]: the source input's element count in each of the n requests.
- BATCH_ACCUMULATED_ELEMENT_COUNT: [n]: the running total of those counts.
- BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: [n + 1]: the same, starting with 0.
- BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: [largest count]: only its shape means anything.
- BATCH_ITEM_SHAPE: [batch items, rank - 1]: each batch item's shape (the request's shape without its
  batch dimension, once per item).
- BATCH_ITEM_SHAPE_FLATTEN: the same, as one row.

Triton fills them as FP32 when the config says so, else INT32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument

_Kind = mc.BatchInput.Kind


def batch_input_tensors(
    batch_inputs: Sequence[mc.BatchInput], requests: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Each batch input's tensor, by target name, for the requests (their inputs) forming one batch."""
    tensors: dict[str, np.ndarray] = {}
    for batch_input in batch_inputs:
        source = batch_input.source_input[0] if batch_input.source_input else ""
        shapes = []
        for inputs in requests:
            if source not in inputs:
                raise InvalidArgument(f"batch input '{batch_input.target_name[0]}' needs input '{source}'")
            shapes.append(tuple(inputs[source].shape))
        dtype = np.float32 if batch_input.data_type == mc.TYPE_FP32 else np.int32
        tensor = _compute(batch_input.kind, shapes).astype(dtype)
        for target in batch_input.target_name:
            tensors[target] = tensor
    return tensors


def _compute(kind: int, shapes: list[tuple[int, ...]]) -> np.ndarray:
    counts = np.array([int(np.prod(shape)) for shape in shapes], dtype=np.int64)
    if kind == _Kind.BATCH_ELEMENT_COUNT:
        return counts
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts)
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.concatenate([[0], np.cumsum(counts)])
    if kind == _Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(int(counts.max(initial=0)), dtype=np.int64)
    if kind in (_Kind.BATCH_ITEM_SHAPE, _Kind.BATCH_ITEM_SHAPE_FLATTEN):
        rank = max((len(shape) - 1 for shape in shapes), default=0)
        items = [shape[1:] for shape in shapes for _ in range(shape[0] if shape else 0)]
        array = np.array(items, dtype=np.int64).reshape(len(items), rank)
        return array.reshape(-1) if kind == _Kind.BATCH_ITEM_SHAPE_FLATTEN else array
    raise InvalidArgument(f"batch input kind {_Kind.Name(kind)} is not supported")


def flatten_ragged(requests: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    """A ragged input as the model sees it: every request's elements, one after the other, in one row."""
    return np.concatenate([np.asarray(inputs[name]).reshape(-1) for inputs in requests])
