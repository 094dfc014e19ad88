"""Batch inputs of ragged batching, computed from the requests of one batch."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.batch_inputs import batch_input_tensors, flatten_ragged

# four requests of one batch item each, with 2, 4, 1 and 3 elements (the figures Triton's tests use)
REQUESTS = [{"IN": np.ones((1, n), np.float32)} for n in (2, 4, 1, 3)]


def _tensor(kind: str, data_type: str = "TYPE_FP32", requests: list | None = None) -> np.ndarray:
    batch_input = text_format.Parse(
        f'kind: {kind} target_name: "B" data_type: {data_type} source_input: "IN"', mc.BatchInput()
    )
    return batch_input_tensors([batch_input], requests or REQUESTS)["B"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("BATCH_ELEMENT_COUNT", [2, 4, 1, 3]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [2, 6, 7, 10]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 2, 6, 7, 10]),
    ],
)
def test_element_counts(kind: str, expected: list[int]) -> None:
    tensor = _tensor(kind)
    assert tensor.dtype == np.float32 and tensor.tolist() == expected
    assert _tensor(kind, "TYPE_INT32").dtype == np.int32


def test_shapes() -> None:
    assert _tensor("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE").shape == (4,)
    items = [{"IN": np.ones((2, 3, 5), np.float32)}, {"IN": np.ones((1, 4, 5), np.float32)}]
    assert _tensor("BATCH_ITEM_SHAPE", requests=items).tolist() == [[3, 5], [3, 5], [4, 5]]
    assert _tensor("BATCH_ITEM_SHAPE_FLATTEN", requests=items).tolist() == [3, 5, 3, 5, 4, 5]


def test_ragged_inputs_become_one_row() -> None:
    assert flatten_ragged(REQUESTS, "IN").shape == (10,)
