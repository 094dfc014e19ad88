"""The server's registry of custom metric families: sharing by name and labels, lifetimes, Triton's
refusals, and the Prometheus text they are exported as."""

from __future__ import annotations

import pytest

from nereid.custom_metrics import COUNTER, GAUGE, HISTOGRAM, CustomMetrics, MetricError
from nereid.frontends.metrics import _custom_family


def _text(registry: CustomMetrics) -> str:
    return "\n".join(_custom_family(f).render() for f in registry.snapshot())


def test_families_of_one_name_share_it_and_keep_the_first_description() -> None:
    registry = CustomMetrics()
    first = registry.new_family("requests", "first description", COUNTER)
    second = registry.new_family("requests", "second description", COUNTER)
    a = registry.new_metric(first, {"k": "label1"}, None)
    b = registry.new_metric(second, {"k": "label2"}, None)
    same = registry.new_metric(second, {"k": "label1"}, None)
    registry.increment(a, 2.5)
    assert registry.value(same) == 2.5  # the same labels: the same series
    registry.delete_family(first)  # its metric handle goes, the series stays while `same` holds it
    assert _text(registry) == (
        "# HELP requests first description\n# TYPE requests counter\n"
        'requests{k="label1"} 2.5\nrequests{k="label2"} 0'
    )
    registry.delete_metric(same)
    assert 'k="label1"' not in _text(registry)
    registry.delete_family(second)
    assert registry.snapshot() == []
    with pytest.raises(MetricError, match="Metric has been invalidated"):
        registry.value(b)


def test_a_name_keeps_its_kind() -> None:
    registry = CustomMetrics()
    registry.new_family("x", "", COUNTER)
    with pytest.raises(MetricError, match="Family name already exists with different type"):
        registry.new_family("x", "", GAUGE)
    with pytest.raises(MetricError, match="Invalid metric name"):
        registry.new_family("1x", "", GAUGE)


def test_each_kind_refuses_what_it_does_not_support() -> None:
    registry = CustomMetrics()
    counter = registry.new_metric(registry.new_family("c", "", COUNTER), {}, None)
    gauge = registry.new_metric(registry.new_family("g", "", GAUGE), {}, None)
    histogram = registry.new_metric(registry.new_family("h", "", HISTOGRAM), {}, [1.0])
    with pytest.raises(MetricError, match="can only be incremented monotonically by non-negative values"):
        registry.increment(counter, -1)
    with pytest.raises(MetricError, match="^Failed to set metric value: .*COUNTER does not support Set$"):
        registry.set(counter, 1)
    with pytest.raises(MetricError, match="GAUGE does not support Observe"):
        registry.observe(gauge, 1)
    for operation in (registry.increment, registry.set):
        with pytest.raises(MetricError, match="HISTOGRAM does not support"):
            operation(histogram, 1)
    registry.increment(gauge, -3)
    registry.set(gauge, 9.5)
    assert registry.value(gauge) == 9.5


@pytest.mark.parametrize("buckets", [None, [2.5, 0.1], [1, 1, 2]])
def test_histograms_need_strictly_ascending_buckets(buckets: list[float] | None) -> None:
    registry = CustomMetrics()
    family = registry.new_family("h", "", HISTOGRAM)
    with pytest.raises(MetricError):
        registry.new_metric(family, {}, buckets)


def test_histograms_export_cumulative_buckets_sum_and_count() -> None:
    registry = CustomMetrics()
    family = registry.new_family("latency", "seconds", HISTOGRAM)
    metric = registry.new_metric(family, {"b": "2", "a": "1"}, [0.1, 1.0, 2.5])
    empty = registry.new_metric(registry.new_family("empty", "", HISTOGRAM), {}, [])
    for value in (0.05, 1.5, 6.0):
        registry.observe(metric, value)
    registry.observe(empty, 3.0)
    text = _text(registry)
    assert 'latency_bucket{a="1",b="2",le="0.1"} 1\n' in text
    assert 'latency_bucket{a="1",b="2",le="1"} 1\n' in text
    assert 'latency_bucket{a="1",b="2",le="2.5"} 2\n' in text
    assert 'latency_bucket{a="1",b="2",le="+Inf"} 3\n' in text
    assert 'latency_sum{a="1",b="2"} 7.55\nlatency_count{a="1",b="2"} 3' in text
    assert 'empty_bucket{le="+Inf"} 1\nempty_sum 3\nempty_count 1' in text


def test_labels_are_checked() -> None:
    registry = CustomMetrics()
    family = registry.new_family("c", "", COUNTER)
    with pytest.raises(MetricError, match="Invalid label name"):
        registry.new_metric(family, {"__reserved": "x"}, None)
    with pytest.raises(MetricError, match="must be a string"):
        registry.new_metric(family, {"n": 1}, None)


def test_closing_a_scope_releases_what_it_made() -> None:
    registry = CustomMetrics()
    mine, other = registry.scope(), registry.scope()
    family = mine.call("family_new", ("shared", "", GAUGE))
    metric = mine.call("metric_new", (family, {"who": "mine"}, None))
    mine.call("set", (metric, 4))
    other.call("metric_new", (other.call("family_new", ("shared", "", GAUGE)), {"who": "other"}, None))
    with pytest.raises(MetricError, match="unknown Metric"):
        other.call("value", (metric, None))  # a handle of another instance's
    mine.close()
    assert _text(registry) == '# HELP shared \n# TYPE shared gauge\nshared{who="other"} 0'
    other.close()
    assert registry.snapshot() == []
