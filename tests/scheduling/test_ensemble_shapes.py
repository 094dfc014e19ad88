"""Triton's batch / non-batch conversion of tensors between ensemble steps."""

from __future__ import annotations

from nereid.scheduling.ensemble_shapes import reshape_for


def test_agreeing_on_batching_changes_nothing() -> None:
    assert reshape_for([-1], True, 4, (4, 7)) == (4, 7)
    assert reshape_for([-1], False, 0, (7,)) == (7,)


def test_a_batching_model_gets_a_batch_of_one_when_the_dims_match() -> None:
    assert reshape_for([-1], True, 0, (7,)) == (1, 7)
    assert reshape_for([3], True, 0, (2, 3)) == (2, 3)  # taken as already batched


def test_a_non_batching_model_loses_a_batch_dimension_of_one_it_does_not_expect() -> None:
    assert reshape_for([3], False, 1, (1, 3)) == (3,)
    assert reshape_for([-1, 3], False, 1, (1, 3)) == (1, 3)  # fits as it is
    assert reshape_for([3], False, 2, (2, 3)) == (2, 3)  # only a batch of one is dropped
