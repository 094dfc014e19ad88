"""pb_utils.MetricFamily and Metric: custom metrics that model code creates and updates, kept by the
server (nereid/custom_metrics.py) and exported on its /metrics endpoint.

Every operation is a call to the server, as in Triton: metrics with the same labels share one value,
whichever instance updates them, and a scrape right after `increment` returns sees it. A family releases
its handle when it is garbage-collected; that release waits for the model's next call to the server
(or the end of its execute), because a finalizer may run anywhere, even while this thread sends.
"""

from __future__ import annotations

from typing import Any, Protocol

from .errors import TritonModelException

_DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The 'MetricFamily' "
    "object should be deleted AFTER its corresponding 'Metric' objects have been deleted."
)


class MetricsHost(Protocol):
    def metric(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Run one operation in the server; raises TritonModelException with the server's text."""
        ...

    def release_family(self, handle: int) -> None:
        """Release a family handle with the next call to the server."""
        ...


class Metric:
    """One labelled metric of a MetricFamily (made by `MetricFamily.Metric`)."""

    def __init__(self, host: MetricsHost, handle: int) -> None:
        self._host = host
        self._handle = handle
        self._cleared = False  # its family was deleted: the metric went with it

    def _call(self, operation: str, value: float | None = None) -> Any:
        if self._cleared:
            raise TritonModelException(_DELETED)
        return self._host.metric(operation, (self._handle, value))

    def increment(self, value: float) -> None:
        self._call("increment", value)

    def set(self, value: float) -> None:
        self._call("set", value)

    def observe(self, value: float) -> None:
        self._call("observe", value)

    def value(self) -> float:
        return float(self._call("value"))


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        from .pb_utils import _server

        self._handle = 0
        self._metrics: list[Metric] = []
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException("Error when creating MetricFamily: Unknown metric kind")
        self.name = name
        self.description = description
        self.kind = kind
        self._host: MetricsHost = _server()
        self._handle = self._host.metric("family_new", (name, description, kind))

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # noqa: N802
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self.kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        handle = self._host.metric("metric_new", (self._handle, dict(labels or {}), buckets))
        metric = Metric(self._host, handle)
        self._metrics.append(metric)
        return metric

    def __del__(self) -> None:
        for metric in self._metrics:
            metric._cleared = True
        if self._handle:
            self._host.release_family(self._handle)
