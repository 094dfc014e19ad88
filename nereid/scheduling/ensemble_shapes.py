"""How an ensemble passes a tensor between a model that batches and one that does not (Triton's rule).

A tensor carries the batch size of the request that made it (0: made by a model without batching, or an
ensemble input when the ensemble does not batch). Only when the receiving model and the tensor disagree
on batching is the shape changed: a batching model gets a tensor whose shape matches its dims with a
batch of 1 prepended; a non-batching model gets a batch-1 tensor without its batch dimension, unless the
tensor's shape already matches the model's dims. Anything else is passed as it is and checked by the
model like any request.
"""

from __future__ import annotations

from collections.abc import Sequence


def dims_match(config_dims: Sequence[int], shape: Sequence[int]) -> bool:
    """Same rank, and each dimension equal or variable (-1) on either side."""
    return len(config_dims) == len(shape) and all(
        c == s or c == -1 or s == -1 for c, s in zip(config_dims, shape, strict=True)
    )


def reshape_for(
    config_dims: Sequence[int], config_batching: bool, tensor_batch: int, shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The shape a tensor takes on its way into a model input (or an ensemble output) with these dims."""
    if config_batching == (tensor_batch != 0):
        return shape
    if config_batching:
        return (1, *shape) if dims_match(config_dims, shape) else shape
    if tensor_batch == 1 and not dims_match(config_dims, shape):
        return shape[1:]
    return shape
