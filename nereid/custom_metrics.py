"""Custom metrics: the metric families model code creates (`pb_utils.MetricFamily`), kept in the server
and exported on /metrics beside Triton's own families.

Model code holds handles. Each `MetricFamily` object gets a family handle and each `Metric` a metric
handle, as each gets a TRITONSERVER_MetricFamily and TRITONSERVER_Metric in Triton: families of the
same name share one exported family (the first description stays), and metrics with the same labels share
one series (its value). A family lives while a handle to it does; a series while a metric handle does.
Every handle belongs to a `MetricsScope`, one per model instance, and closing the scope (the instance
unloads, its worker dies) releases them all, so a model's families leave /metrics with it.

The checks and error texts are Triton's (its Python backend's wording around its core's).
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
KIND_NAMES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}
_TRITON_KINDS = {COUNTER: "COUNTER", GAUGE: "GAUGE", HISTOGRAM: "HISTOGRAM"}
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelKey = tuple[tuple[str, str], ...]


class MetricError(Exception):
    """A refused metric operation; its text is what model code sees in its TritonModelException."""


@dataclass
class Series:
    """One labelled metric of a family: a counter's or gauge's value, or a histogram's buckets."""

    labels: LabelKey
    buckets: tuple[float, ...] = ()
    value: float = 0.0  # counter and gauge; a histogram's sum
    counts: list[int] = field(default_factory=list)  # histogram: observations per bucket, +Inf last
    count: int = 0  # histogram: observations
    holders: int = 0  # metric handles on it


@dataclass
class CustomFamily:
    name: str
    description: str
    kind: int
    handles: int = 0  # family handles on it
    series: dict[LabelKey, Series] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return KIND_NAMES[self.kind]


class CustomMetrics:
    """Every custom family of the server, by name. Thread-safe: model threads (EXECUTION_MODE thread) and
    the event loop (for worker processes) call it, and the metrics endpoint reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, CustomFamily] = {}
        self._family_handles: dict[int, CustomFamily] = {}
        self._metric_handles: dict[int, tuple[CustomFamily, Series, int]] = {}  # and its family handle
        self._ids = itertools.count(1)

    def scope(self) -> MetricsScope:
        return MetricsScope(self)

    def snapshot(self) -> list[CustomFamily]:
        """Copies of the families with at least one series, for rendering outside the lock."""
        with self._lock:
            return [
                CustomFamily(
                    f.name,
                    f.description,
                    f.kind,
                    series={k: _copy(s) for k, s in f.series.items()},
                )
                for f in self._families.values()
            ]

    # family handles
    def new_family(self, name: str, description: str, kind: int) -> int:
        if kind not in KIND_NAMES:
            raise MetricError("Error when creating MetricFamily: Unknown metric kind")
        if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
            raise MetricError(f"Error when creating MetricFamily: Invalid metric name '{name}'")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = CustomFamily(name, str(description), kind)
            elif family.kind != kind:
                raise MetricError(
                    "Error when creating MetricFamily: Family name already exists with different type"
                )
            family.handles += 1
            handle = next(self._ids)
            self._family_handles[handle] = family
            return handle

    def delete_family(self, handle: int) -> None:
        """Release a family handle and the metric handles made through it."""
        with self._lock:
            family = self._family_handles.pop(handle, None)
            if family is None:
                return
            for metric, (_, series, owner) in list(self._metric_handles.items()):
                if owner == handle:
                    del self._metric_handles[metric]
                    self._drop_series(family, series)
            family.handles -= 1
            if family.handles == 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    # metric handles
    def new_metric(
        self, family_handle: int, labels: Mapping[str, Any], buckets: Sequence[float] | None
    ) -> int:
        with self._lock:
            family = self._family_handles.get(family_handle)
            if family is None:
                raise MetricError("Error when creating Metric: the MetricFamily has been deleted")
            key = _label_key(labels)
            bounds = _buckets(buckets) if family.kind == HISTOGRAM else ()
            series = family.series.get(key)
            if series is None:  # the same labels share the first series, its buckets included
                series = family.series[key] = Series(key, bounds, counts=[0] * (len(bounds) + 1))
            series.holders += 1
            handle = next(self._ids)
            self._metric_handles[handle] = (family, series, family_handle)
            return handle

    def delete_metric(self, handle: int) -> None:
        with self._lock:
            entry = self._metric_handles.pop(handle, None)
            if entry is not None:
                self._drop_series(entry[0], entry[1])

    def increment(self, handle: int, value: float) -> None:
        with self._lock:
            family, series = self._metric(handle, "Failed to increment metric value: ", "Increment")
            if family.kind == COUNTER and value < 0:
                raise MetricError(
                    "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be "
                    "incremented monotonically by non-negative values."
                )
            series.value += value

    def set(self, handle: int, value: float) -> None:
        with self._lock:
            family, series = self._metric(handle, "Failed to set metric value: ", "Set", (GAUGE,))
            series.value = value

    def observe(self, handle: int, value: float) -> None:
        with self._lock:
            family, series = self._metric(handle, "Failed to observe metric value: ", "Observe", (HISTOGRAM,))
            series.counts[bisect.bisect_left(series.buckets, value)] += 1
            series.count += 1
            series.value += value

    def value(self, handle: int) -> float:
        with self._lock:
            _, series = self._metric(handle, "Failed to get metric value: ", "Value")
            return series.value

    def _metric(
        self, handle: int, prefix: str, operation: str, kinds: tuple[int, ...] = (COUNTER, GAUGE)
    ) -> tuple[CustomFamily, Series]:
        entry = self._metric_handles.get(handle)
        if entry is None:
            raise MetricError(f"{prefix}Metric has been invalidated.")
        family, series, _ = entry
        if family.kind not in kinds:
            kind = _TRITON_KINDS[family.kind]
            raise MetricError(f"{prefix}TRITONSERVER_METRIC_KIND_{kind} does not support {operation}")
        return family, series

    def _drop_series(self, family: CustomFamily, series: Series) -> None:
        series.holders -= 1
        if series.holders == 0 and family.series.get(series.labels) is series:
            del family.series[series.labels]


class MetricsScope:
    """The handles one model instance holds; `close` releases them all. `call` runs one operation that
    model code asked for, by name (what a worker process sends over its socket)."""

    def __init__(self, registry: CustomMetrics) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._families: set[int] = set()
        self._metrics: set[int] = set()

    def call(self, operation: str, args: Sequence[Any]) -> Any:
        registry = self._registry
        if operation == "family_new":
            handle = registry.new_family(*args)
            with self._lock:
                self._families.add(handle)
            return handle
        if operation == "family_delete":  # handles released together (garbage-collected families)
            for handle in args:
                with self._lock:
                    if handle not in self._families:
                        continue
                    self._families.discard(handle)
                registry.delete_family(handle)
            return None
        if operation == "metric_new":
            family = args[0]
            with self._lock:
                if family not in self._families:
                    raise MetricError("Error when creating Metric: unknown MetricFamily")
            handle = registry.new_metric(*args)
            with self._lock:
                self._metrics.add(handle)
            return handle
        handle, value = args
        with self._lock:
            if handle not in self._metrics:
                raise MetricError("Invalid metric operation: unknown Metric")
        if operation == "increment":
            return registry.increment(handle, float(value))
        if operation == "set":
            return registry.set(handle, float(value))
        if operation == "observe":
            return registry.observe(handle, float(value))
        if operation == "value":
            return registry.value(handle)
        raise MetricError("Unknown metric operation")

    def close(self) -> None:
        with self._lock:
            metrics, self._metrics = self._metrics, set()
            families, self._families = self._families, set()
        for handle in metrics:
            self._registry.delete_metric(handle)
        for handle in families:
            self._registry.delete_family(handle)


def _label_key(labels: Mapping[str, Any] | None) -> LabelKey:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise MetricError("Failed to create metric. Labels must be a dictionary.")
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            raise MetricError(f"Error when creating Metric: Invalid label name '{name}'")
        if not isinstance(value, str):
            raise MetricError(f"Error when creating Metric: the value of label '{name}' must be a string")
    return tuple(sorted(labels.items()))


def _buckets(buckets: Sequence[float] | None) -> tuple[float, ...]:
    if buckets is None:
        raise MetricError("Failed to create metric. Missing required buckets.")
    try:
        bounds = tuple(float(b) for b in buckets)
    except (TypeError, ValueError):
        raise MetricError("Failed to create metric. Buckets must be a list of numbers.") from None
    if any(a >= b for a, b in itertools.pairwise(bounds)) or any(math.isnan(b) for b in bounds):
        raise MetricError("Error when creating Metric: Bucket Boundaries must be strictly sorted")
    return bounds


def _copy(series: Series) -> Series:
    return Series(series.labels, series.buckets, series.value, list(series.counts), series.count)
