"""The classification extension's refusals, with Triton's texts (its clients look for them)."""

from __future__ import annotations

import numpy as np
import pytest

from nereid.classification import MAX_CLASSIFICATION_ELEMENTS, classify
from nereid.errors import InvalidArgument


@pytest.mark.parametrize("array", [np.array([[b"a", b"b"]], dtype=object), np.ones((1, 2), np.float16)])
def test_only_fp32_fp64_and_integers_are_ranked(array: np.ndarray) -> None:
    with pytest.raises(
        InvalidArgument, match="class result not available for output due to unsupported type"
    ):
        classify(array, 1, (), True, "OUTPUT0")


def test_rows_beyond_the_limit_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="classification output tensor too large"):
        classify(np.ones((1, MAX_CLASSIFICATION_ELEMENTS + 1), np.float32), 5, (), True, "OUTPUT0")
    top = classify(np.array([[1, 9, 3]], np.int32), 2, ("a", "b", "c"), True, "OUTPUT0")
    assert top.tolist() == [[b"9:1:b", b"3:2:c"]]
