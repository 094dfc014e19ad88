"""The shape limits every frontend checks before it builds a request tensor."""

from __future__ import annotations

from collections.abc import Sequence

from nereid.errors import InvalidArgument

MAX_RANK = 32  # numpy's own limit is 64; no model has tensors of higher rank
MAX_ELEMENTS = 2**40  # numpy refuses shapes whose byte size overflows, even with a zero dimension


def element_count(shape: Sequence[int], name: str) -> int:
    """Elements in a shape of non-negative dimensions; refuses what numpy could not allocate."""
    count = 1
    bound = 1
    for d in shape:
        count *= d
        bound *= d or 1
    if len(shape) > MAX_RANK or bound > MAX_ELEMENTS:
        raise shape_too_large(shape, name)
    return count


def shape_too_large(shape: Sequence[int], name: str) -> InvalidArgument:
    return InvalidArgument(
        f"input '{name}' has shape {list(shape)}: more than {MAX_RANK} dimensions or {MAX_ELEMENTS} elements "
        "cannot be served"
    )
