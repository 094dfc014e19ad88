"""pb_utils.MetricFamily and Metric: custom metrics model code creates and updates. Values are kept in
the worker: Nereid has no metrics endpoint to export them yet."""

from __future__ import annotations

from .errors import TritonModelException


class Metric:
    """One labelled metric of a MetricFamily."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        self._family = family
        self._labels = dict(labels)
        self._buckets = list(buckets or [])
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        self._value += value

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only gauges can be set")
        self._value = value

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only histograms observe values")
        self._value += value

    def value(self) -> float:
        return self._value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int = COUNTER) -> None:
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # noqa: N802
        return Metric(self, labels or {}, buckets)
