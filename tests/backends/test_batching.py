"""Concatenating requests into one execution and splitting the outputs back."""

from __future__ import annotations

import numpy as np

from nereid.backends.base import BackendRequest, Outputs
from nereid.backends.batching import execute_batched
from nereid.errors import InternalError, InvalidArgument


class Recorder:
    def __init__(self) -> None:
        self.calls: list[BackendRequest] = []

    def __call__(self, request: BackendRequest) -> Outputs:
        self.calls.append(request)
        x = request.inputs["X"]
        return {"DOUBLE": x * 2, "ROWSUM": x.sum(axis=tuple(range(1, x.ndim)))}


def _request(rows: int, width: int, start: int, outputs: tuple[str, ...] = ("DOUBLE",)) -> BackendRequest:
    data = np.arange(start, start + rows * width, dtype=np.float32).reshape(rows, width)
    return BackendRequest({"X": data}, outputs)


def test_same_shapes_run_once_and_split_by_rows() -> None:
    run = Recorder()
    requests = [_request(1, 3, 0), _request(2, 3, 10, ("ROWSUM",)), _request(3, 3, 100, ("DOUBLE", "ROWSUM"))]
    results = execute_batched(requests, run)
    assert len(run.calls) == 1
    assert run.calls[0].inputs["X"].shape == (6, 3)
    assert set(run.calls[0].outputs) == {"DOUBLE", "ROWSUM"}
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, dict)
        assert set(result) == set(request.outputs)
        x = request.inputs["X"]
        if "DOUBLE" in result:
            np.testing.assert_array_equal(result["DOUBLE"], x * 2)
        if "ROWSUM" in result:
            np.testing.assert_array_equal(result["ROWSUM"], x.sum(axis=1))


def test_different_shapes_run_apart() -> None:
    run = Recorder()
    requests = [_request(1, 3, 0), _request(1, 4, 0), _request(2, 3, 5)]
    results = execute_batched(requests, run)
    assert sorted(c.inputs["X"].shape for c in run.calls) == [(1, 4), (3, 3)]
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, dict)
        np.testing.assert_array_equal(result["DOUBLE"], request.inputs["X"] * 2)


def test_a_failed_execution_fails_each_of_its_requests() -> None:
    def run(request: BackendRequest) -> Outputs:
        if request.inputs["X"].shape[1] == 4:
            raise InvalidArgument("no width 4")
        return {"DOUBLE": request.inputs["X"]}

    results = execute_batched([_request(1, 4, 0), _request(1, 3, 0), _request(1, 4, 9)], run)
    assert isinstance(results[0], InvalidArgument) and isinstance(results[2], InvalidArgument)
    assert isinstance(results[1], dict)


def test_outputs_without_a_row_per_batch_element_cannot_be_split() -> None:
    results = execute_batched(
        [_request(1, 3, 0), _request(1, 3, 0)], lambda r: {"DOUBLE": np.zeros(5, np.float32)}
    )
    assert all(isinstance(r, InternalError) and "needs 2 rows" in str(r) for r in results)
