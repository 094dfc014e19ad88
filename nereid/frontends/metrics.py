"""Prometheus metrics with Triton's family names, labels and types, rendered from the statistics.

The text exposition is written here rather than by prometheus-client, because that library renames
every counter family to `<name>_total`, and dashboards built on Triton query the names Triton uses
(`nv_inference_count`, not `nv_inference_count_total`).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nereid.core.engine_client import EngineClient, ModelMetrics
from nereid.custom_metrics import HISTOGRAM, CustomFamily, CustomMetrics
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.gpu_metrics import GpuReading, GpuSampler
from nereid.settings import MetricsConfig
from nereid.statistics import FAILURE_REASONS, QUEUE_DELAY_BUCKETS_US, REQUEST_DURATION_BUCKETS_US

Labels = dict[str, str]


@dataclass
class Family:
    name: str
    help: str
    type: str  # "counter", "gauge", "summary" or "histogram"
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    # samples of summaries and histograms named `<family><suffix>` (`_count`, `_sum`, `_bucket`)
    suffixed: list[tuple[str, Labels, float]] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.type}"]
        for suffix, labels, value in self.suffixed:
            lines.append(_sample(self.name + suffix, labels, value))
        for labels, value in self.samples:
            lines.append(_sample(self.name, labels, value))
        return "\n".join(lines)


def _sample(name: str, labels: Labels, value: float) -> str:
    # labels sorted, a histogram's `le` and a summary's `quantile` last, as Triton's exporter writes them
    items = sorted(labels.items(), key=lambda item: (item[0] in ("le", "quantile"), item[0]))
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in items)
    number = number_text(value)
    return f"{name}{{{text}}} {number}" if text else f"{name} {number}"


def number_text(value: float) -> str:
    """A sample value as Prometheus' exporters write it: whole numbers without a fraction."""
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
)


def _counter_values(model: ModelMetrics) -> dict[str, float]:
    s = model.statistics
    return {
        "nv_inference_request_success": s.success.count,
        "nv_inference_count": s.inference_count,
        "nv_inference_exec_count": s.execution_count,
        "nv_inference_request_duration_us": (s.success.ns + s.fail.ns) // 1000,
        "nv_inference_queue_duration_us": s.queue.ns // 1000,
        "nv_inference_compute_input_duration_us": s.compute_input.ns // 1000,
        "nv_inference_compute_infer_duration_us": s.compute_infer.ns // 1000,
        "nv_inference_compute_output_duration_us": s.compute_output.ns // 1000,
    }


_CACHE_FAMILIES = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model"),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds"),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model"),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    ),
)


def _cache_families(models: list[ModelMetrics]) -> list[Family]:
    """Triton's per-model response cache counters, for the models whose responses are cached."""
    cached = [m for m in models if m.response_cache]
    if not cached:
        return []
    families = [Family(name, text, "counter") for name, text in _CACHE_FAMILIES]
    for model in cached:
        s, labels = model.statistics, _labels(model)
        values = (s.cache_hit.count, s.cache_hit.ns // 1000, s.cache_miss.count, s.cache_miss.ns // 1000)
        for family, value in zip(families, values, strict=True):
            family.samples.append((labels, value))
    return families


class CpuSampler:
    """CPU utilization over the last interval and memory in use, from /proc (Linux)."""

    def __init__(self) -> None:
        self.utilization = 0.0
        self._last: tuple[int, int] | None = None

    def sample(self) -> None:
        try:
            with open("/proc/stat") as fh:
                fields = [int(x) for x in fh.readline().split()[1:]]
        except OSError:
            return
        idle, total = fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)
        if self._last is not None and total > self._last[1]:
            busy = (total - self._last[1]) - (idle - self._last[0])
            self.utilization = max(0.0, min(1.0, busy / (total - self._last[1])))
        self._last = (idle, total)

    @staticmethod
    def memory() -> tuple[int, int] | None:
        """(total, used) bytes."""
        try:
            with open("/proc/meminfo") as fh:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        except (OSError, ValueError, IndexError):
            return None
        return info["MemTotal"], info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))


_SUMMARIES = (
    ("request", "nv_inference_request_summary_us", "Summary of inference request duration in microseconds"),
    ("queue", "nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds"),
    (
        "compute_input",
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds",
    ),
    (
        "compute_infer",
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds",
    ),
    (
        "compute_output",
        "nv_inference_compute_output_summary_us",
        "Summary of compute output duration in microseconds",
    ),
)


# The response cache's summaries, of the models whose responses are cached
_CACHE_SUMMARIES = (
    ("cache_hit", "nv_cache_hit_summary_us", "Summary of response cache hit durations in microseconds"),
    (
        "cache_miss",
        "nv_cache_miss_summary_us",
        "Summary of response cache miss durations (lookup and insert) in microseconds",
    ),
)


# Nereid keeps no pinned (page-locked, CUDA) host memory pool: both gauges read 0, as they do on Triton
# without a GPU
_PINNED_MEMORY_FAMILIES = [
    Family(
        "nv_pinned_memory_pool_total_bytes", "Size of the pinned memory pool, in bytes", "gauge", [({}, 0)]
    ),
    Family("nv_pinned_memory_pool_used_bytes", "Pinned memory pool bytes in use", "gauge", [({}, 0)]),
]


class MetricsExporter:
    def __init__(
        self,
        engine: EngineClient,
        cpu_metrics: bool = True,
        config: MetricsConfig | None = None,
        custom: CustomMetrics | None = None,
        gpu: GpuSampler | None = None,
    ) -> None:
        self._engine = engine
        self._cpu = CpuSampler() if cpu_metrics else None
        self._gpu = gpu
        self._config = config or MetricsConfig()
        self._custom = custom  # the families model code creates (pb_utils.MetricFamily)

    async def sample_forever(self, interval_s: float) -> None:
        """Refresh the gauges Triton refreshes on --metrics-interval-ms."""
        if self._cpu is None and self._gpu is None:
            return
        while True:
            if self._cpu is not None:
                self._cpu.sample()
            if self._gpu is not None:  # NVML's power readings can take milliseconds: off the event loop
                await asyncio.to_thread(self._gpu.sample)
            await asyncio.sleep(interval_s)

    def families(self) -> list[Family]:
        models = self._engine.model_metrics()
        counters = _COUNTERS if self._config.counter_latencies else _COUNTERS[:3]
        families = [Family(name, text, "counter") for name, text in counters[:1]]
        failure = Family(
            "nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter"
        )
        families.append(failure)
        families += [Family(name, text, "counter") for name, text in counters[1:]]
        pending = Family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        by_name = {f.name: f for f in families}
        for model in models:
            labels = _labels(model)
            for name, value in _counter_values(model).items():
                if name in by_name:
                    by_name[name].samples.append((labels, value))
            for reason in FAILURE_REASONS:
                failure.samples.append(({**labels, "reason": reason}, model.statistics.failures[reason]))
            pending.samples.append((labels, model.pending))
        families.append(pending)
        families += _load_and_first_response_families(models)
        families += _PINNED_MEMORY_FAMILIES
        if self._gpu is not None:
            families += _gpu_families(self._gpu.readings)
        families += self._cpu_families()
        families += self._summary_families(models)
        families += _batching_families(models)
        families += _cache_families(models)
        if self._custom is not None:
            families += [_custom_family(f) for f in self._custom.snapshot()]
        return families

    def _summary_families(self, models: list[ModelMetrics]) -> list[Family]:
        if not self._config.summary_latencies:
            return []
        quantiles = self._config.summary_quantiles
        now = time.monotonic()
        families = []
        for key, name, text in _SUMMARIES + _CACHE_SUMMARIES:
            family = Family(name, text, "summary")
            cached = 0
            for model in models:
                summaries = model.statistics.summaries
                if summaries is None or (key.startswith("cache_") and not model.response_cache):
                    continue
                if key == "request" and model.response_cache:
                    cached += 1  # Triton publishes no request summary for a model whose responses are cached
                    continue
                window = summaries.windows[key]
                labels = _labels(model)
                family.suffixed += [("_count", labels, window.count), ("_sum", labels, window.sum)]
                for quantile, value in zip(quantiles, window.quantiles(quantiles, now), strict=True):
                    family.samples.append(({**labels, "quantile": repr(quantile)}, value))
            if not family.suffixed and (cached or key.startswith("cache_")):
                continue  # nor its name, when no model has one for these reasons
            families.append(family)
        return families

    def _cpu_families(self) -> Iterable[Family]:
        if self._cpu is None:
            return []
        families = [
            Family(
                "nv_cpu_utilization",
                "CPU utilization rate [0.0 - 1.0]",
                "gauge",
                [({}, self._cpu.utilization)],
            )
        ]
        memory = self._cpu.memory()
        if memory is not None:
            total, used = memory
            families.append(
                Family(
                    "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge", [({}, total)]
                )
            )
            families.append(
                Family("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge", [({}, used)])
            )
        return families

    def render(self) -> bytes:
        return ("\n".join(f.render() for f in self.families()) + "\n").encode()


_GPU_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge", "memory_total"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge", "memory_used"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge", "power_usage"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge", "power_limit"),
    (
        "nv_energy_consumption",
        "GPU energy consumption in joules since the server started",
        "counter",
        "energy",
    ),
)


def _gpu_families(readings: Sequence[GpuReading]) -> list[Family]:
    return [
        Family(name, text, kind, [({"gpu_uuid": r.uuid}, getattr(r, field)) for r in readings])
        for name, text, kind, field in _GPU_FAMILIES
    ]


def _load_and_first_response_families(models: list[ModelMetrics]) -> list[Family]:
    load = Family("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
    first = Family(
        "nv_inference_first_response_histogram_ms",
        "Duration from request to first response in milliseconds",
        "histogram",
    )
    for model in models:
        labels = _labels(model)
        load.samples.append((labels, round(model.load_duration_s, 9)))
        histogram = model.statistics.first_response
        if histogram is not None:  # --metrics-config histogram_latencies=true
            counts = list(histogram.counts)
            first.suffixed += _fixed_buckets(labels, histogram.bounds, counts, histogram.sum, histogram.count)
    return [load, first] if first.suffixed else [load]


def _custom_family(family: CustomFamily) -> Family:
    """A family model code made: its series as they are, with the labels it gave them."""
    rendered = Family(family.name, family.description, family.type)
    for series in family.series.values():
        labels = dict(series.labels)
        if family.kind == HISTOGRAM:
            rendered.suffixed += _fixed_buckets(
                labels, series.buckets, series.counts, series.value, series.count
            )
        else:
            rendered.samples.append((labels, series.value))
    return rendered


def _batching_families(models: list[ModelMetrics]) -> list[Family]:
    """Nereid's own histograms, which show why batches are small: how large each execution was, and how
    long requests waited in the queue for one (see docs/batching.md)."""
    sizes = Family(
        "nereid_inference_batch_size",
        "Batch size of each model execution (elements along the batch dimension)",
        "histogram",
    )
    delays = Family(
        "nereid_inference_queue_delay_us",
        "Time each successful request waited in the scheduler's queue, in microseconds",
        "histogram",
    )
    durations = Family(
        "nereid_inference_request_duration_us",
        "Duration of each successful request, arrival to response, in microseconds",
        "histogram",
    )
    for model in models:
        labels = _labels(model)
        s = model.statistics
        executions = s.batch_executions()
        bounds = [1]
        while bounds[-1] < max(model.max_batch_size, max(executions, default=1)):
            bounds.append(bounds[-1] * 2)
        sizes.suffixed += _buckets(
            labels,
            bounds,
            [sum(n for size, n in executions.items() if size <= b) for b in bounds],
            sum(executions.values()),
            s.inference_count,
            s.execution_count,
        )
        delays.suffixed += _fixed_buckets(
            labels, QUEUE_DELAY_BUCKETS_US, s.queue_delays, s.queue.ns // 1000, s.queue.count
        )
        durations.suffixed += _fixed_buckets(
            labels, REQUEST_DURATION_BUCKETS_US, s.request_durations, s.success.ns // 1000, s.success.count
        )
    return [sizes, delays, durations]


def _buckets(
    labels: Labels, bounds: Sequence[float], cumulative: list[int], total: int, sum_: float, count: int
) -> list[tuple[str, Labels, float]]:
    rows: list[tuple[str, Labels, float]] = [
        ("_bucket", {**labels, "le": number_text(bound)}, n)
        for bound, n in zip(bounds, cumulative, strict=True)
    ]
    rows += [("_bucket", {**labels, "le": "+Inf"}, total), ("_sum", labels, sum_), ("_count", labels, count)]
    return rows


def _fixed_buckets(
    labels: Labels, bounds: Sequence[float], per_bucket: list[int], sum_: float, count: int
) -> list[tuple[str, Labels, float]]:
    """A histogram kept as counts per bucket (the last one +Inf), not cumulative."""
    cumulative = list(itertools.accumulate(per_bucket))
    return _buckets(labels, list(bounds), cumulative[:-1], cumulative[-1], sum_, count)


def _labels(model: ModelMetrics) -> Labels:
    # a model's `metric_tags` become extra labels, as in Triton
    return {**model.tags, "model": model.name, "version": model.version}


async def handle_metrics(exporter: MetricsExporter, request: HttpRequest) -> HttpResponse:
    """The metrics port answers GET /metrics and nothing else."""
    if request.path != "/metrics":
        return HttpResponse(404, b"Not Found", [(b"content-type", b"text/plain")])
    if request.method != "GET":
        return HttpResponse(405, b"Method Not Allowed", [(b"content-type", b"text/plain")])
    return HttpResponse(
        200, exporter.render(), [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
    )
