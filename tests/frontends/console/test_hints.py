"""The batching hint: why batches are small, from a window of a model's statistics."""

from __future__ import annotations

import pytest

from nereid.frontends.console.hints import BatchingSetup, BatchingWindow, batching_hint

DYNAMIC = BatchingSetup(max_batch_size=8, dynamic_batching=True, max_queue_delay_us=500, instances=2)


def _window(requests: int, executions: int, inferences: int, concurrency: float, seconds: float = 10.0):
    # every request in flight `concurrency / rate` seconds on average, so that Little's law gives it back
    request_ns = int(concurrency * seconds * 1e9)
    return BatchingWindow(seconds, requests, executions, inferences, request_ns, queue_ns=requests * 20_000)


@pytest.mark.parametrize(
    ("setup", "window", "code"),
    [
        (DYNAMIC, _window(0, 0, 0, 0), "idle"),
        (BatchingSetup(8, True, ensemble=True), _window(100, 100, 100, 1), "ensemble"),
        (BatchingSetup(0, False), _window(100, 100, 100, 4), "unbatched_model"),
        (BatchingSetup(8, False, instances=2), _window(100, 100, 100, 6), "batcher_off"),
        # one client at a time on two instances: nothing is ever waiting, whatever the delay
        (DYNAMIC, _window(1000, 1000, 1000, 1.0), "low_concurrency"),
        # many in flight, but the batcher takes whatever is waiting at once
        (BatchingSetup(8, True, 0, instances=1), _window(1000, 700, 1000, 6.0), "zero_delay"),
        (DYNAMIC, _window(1000, 700, 1000, 6.0), "short_delay"),
        (DYNAMIC, _window(1000, 125, 1000, 16.0), "full"),
        (DYNAMIC, _window(1000, 200, 1000, 12.0), "good"),
        (BatchingSetup(8, True, 100, (2,), 1), _window(1000, 500, 1000, 3.0), "good"),
    ],
)
def test_hint_codes(setup: BatchingSetup, window: BatchingWindow, code: str) -> None:
    assert batching_hint(setup, window).code == code


def test_hint_values_are_what_the_sentence_needs() -> None:
    hint = batching_hint(DYNAMIC, _window(1000, 1000, 1000, 1.0))
    assert hint.values == {
        "mean_batch": 1.0,
        "max_batch": 8,
        "rate": 100.0,
        "concurrency": 1.0,
        "instances": 2,
        "delay_us": 500,
        "queue_ms": 0.02,
    }
