"""The dynamic batcher's policy with plain numbers: no threads, no clock, no models."""

from __future__ import annotations

from nereid.scheduling.batch_policy import BatchPolicy, Decision, Pending, decide, order


def _queue(*sizes: int, shape: object = (16,), start: float = 0.0) -> list[Pending]:
    return [Pending(size, shape, start + i * 0.001) for i, size in enumerate(sizes)]


def test_no_delay_sends_whatever_is_queued_up_to_the_maximum() -> None:
    policy = BatchPolicy(max_batch_size=4)
    assert decide(_queue(1, 1), now=1.0, policy=policy) == Decision((0, 1))
    assert decide(_queue(1, 2, 2), now=1.0, policy=policy).run == (0, 1)  # 1+2+2 > 4
    assert decide(_queue(3, 3), now=1.0, policy=policy).run == (0,)
    assert decide([], now=1.0, policy=policy) == Decision(())


def test_a_request_larger_than_the_maximum_still_runs_alone() -> None:
    assert decide(_queue(8), now=0.0, policy=BatchPolicy(max_batch_size=4)).run == (0,)


def test_delay_waits_for_more_until_the_oldest_is_due() -> None:
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.010)
    queue = _queue(1, 1)
    assert decide(queue, now=0.002, policy=policy) == Decision((), wake_at=0.010)
    assert decide(queue, now=0.010, policy=policy).run == (0, 1)
    assert decide(_queue(4, 4), now=0.002, policy=policy).run == (0, 1)  # full: no need to wait


def test_largest_preferred_size_goes_at_once() -> None:
    policy = BatchPolicy(max_batch_size=8, preferred_batch_sizes=(2, 4), max_queue_delay_s=1.0)
    assert decide(_queue(1, 1, 1), now=0.0, policy=policy).run == (0, 1)
    assert decide(_queue(1, 1, 1, 1, 1), now=0.0, policy=policy).run == (0, 1, 2, 3)
    assert decide(_queue(1), now=0.0, policy=policy).run == ()  # no preferred size yet: wait


def test_shapes_batch_only_with_equals() -> None:
    queue = [Pending(1, (16,), 0.0), Pending(1, (16,), 0.1), Pending(1, (32,), 0.2), Pending(1, (16,), 0.3)]
    assert decide(queue, now=1.0, policy=BatchPolicy(max_batch_size=8)).run == (0, 1)


def test_priorities_before_arrival() -> None:
    queue = [
        Pending(1, (), 0.0, priority=2),
        Pending(1, (), 0.1, priority=1),
        Pending(1, (), 0.2, priority=1),
    ]
    assert order(queue, now=1.0) == [1, 2, 0]
    assert decide(queue, now=1.0, policy=BatchPolicy(max_batch_size=2)).run == (1, 2)


def test_timeouts_reject_or_delay() -> None:
    queue = [
        Pending(1, (), 0.0, deadline=0.5),  # REJECT once due
        Pending(1, (), 0.1, deadline=0.5, delay_on_timeout=True),  # DELAY: behind the others
        Pending(1, (), 0.2),
    ]
    decision = decide(queue, now=0.6, policy=BatchPolicy(max_batch_size=1))
    assert decision.reject == (0,) and decision.run == (2,)
    before = decide(queue, now=0.1, policy=BatchPolicy(max_batch_size=8, max_queue_delay_s=1.0))
    assert before == Decision((), wake_at=0.5)  # the first deadline comes before the delay


def test_a_delayed_request_stays_ahead_of_the_next_priority_level() -> None:
    queue = [
        Pending(1, (), 0.0, priority=1, deadline=0.5, delay_on_timeout=True),  # timed out: DELAY
        Pending(1, (), 0.1, priority=1),
        Pending(3, (), 0.2, priority=2),
        Pending(6, (), 0.3, priority=2),
    ]
    assert order(queue, now=1.0) == [1, 0, 2, 3]
    policy = BatchPolicy(max_batch_size=32, preferred_batch_sizes=(4, 8), max_queue_delay_s=10.0)
    assert decide(queue[:1] + queue[2:], now=1.0, policy=policy).run == (0, 1)  # 1 + 3: preferred 4


def test_nothing_runs_while_no_instance_is_free_but_timeouts_still_reject() -> None:
    queue = [Pending(1, (), 0.0, deadline=0.5), Pending(1, (), 0.1)]
    decision = decide(queue, now=0.6, policy=BatchPolicy(max_batch_size=4), instance_free=False)
    assert decision.run == () and decision.reject == (0,)


def test_each_batch_says_why_it_was_cut_there() -> None:
    """The verbose log's reasons: maximum, preferred size, queue delay, the next request not fitting."""
    full = BatchPolicy(max_batch_size=2)
    assert decide(_queue(1, 1, 1), now=0.0, policy=full).reason == "reached max_batch_size 2"
    assert decide(_queue(1, 2), now=0.0, policy=full).reason == (
        "the next request would exceed max_batch_size 2"
    )
    preferred = BatchPolicy(max_batch_size=8, preferred_batch_sizes=(2,), max_queue_delay_s=1.0)
    assert decide(_queue(1, 1, 1), now=0.0, policy=preferred).reason == "reached preferred batch size 2"
    mixed = [Pending(1, (16,), 0.0), Pending(1, (32,), 0.1)]
    assert "shape mismatch" in decide(mixed, now=0.0, policy=BatchPolicy(max_batch_size=8)).reason
    no_delay = decide(_queue(1), now=0.0, policy=BatchPolicy(max_batch_size=8)).reason
    assert no_delay == "max_queue_delay_microseconds is 0 (1 queued)"
    delayed = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.010)
    assert decide(_queue(1), now=0.010, policy=delayed).reason.startswith(
        "the oldest request waited max_queue_delay_microseconds"
    )


def test_no_preferred_size_means_max_batch_size() -> None:
    policy = BatchPolicy(max_batch_size=4, max_queue_delay_s=1.0)
    assert decide(_queue(2, 2), now=0.0, policy=policy).run == (0, 1)  # 4 is the preferred size
    assert decide(_queue(2, 1), now=0.0, policy=policy).run == ()  # 3: waits for the delay


def test_a_batch_at_or_above_the_largest_preferred_size_goes_at_once() -> None:
    """Triton's batcher sends a request of 7 at once with preferred sizes 2 and 6, however long the
    queue delay; it does not wait for a batch of 8 to form."""
    policy = BatchPolicy(max_batch_size=8, preferred_batch_sizes=(2, 6), max_queue_delay_s=10.0)
    decision = decide(_queue(7), now=0.0, policy=policy)
    assert decision.run == (0,) and decision.wake_at is None
    assert decision.reason == "reached the largest preferred batch size 6"


def test_what_fits_under_the_largest_preferred_size_goes_when_the_queue_holds_more() -> None:
    policy = BatchPolicy(max_batch_size=8, preferred_batch_sizes=(4, 6), max_queue_delay_s=10.0)
    decision = decide(_queue(3, 2, 3), now=0.0, policy=policy)  # 3+2 = 5, and 3 more passes 6
    assert decision.run == (0, 1)
    assert decision.reason == "the next request would exceed the largest preferred batch size 6"


def test_once_the_delay_passed_everything_that_fits_goes_not_just_the_preferred_size() -> None:
    policy = BatchPolicy(max_batch_size=8, preferred_batch_sizes=(2, 6), max_queue_delay_s=1.0)
    assert decide(_queue(1, 1, 1), now=0.5, policy=policy).run == (0, 1)  # preferred 2, before the delay
    late = decide(_queue(1, 1, 1), now=1.0, policy=policy)
    assert late.run == (0, 1, 2) and late.reason.startswith("the oldest request waited")
    # past the largest preferred size, up to max_batch_size
    assert decide(_queue(4, 3, 1, 1), now=1.0, policy=policy).run == (0, 1, 2)
