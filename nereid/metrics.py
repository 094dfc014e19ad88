"""Prometheus metrics with Triton's family names, labels and types, rendered from the statistics.

The text exposition is written here rather than by prometheus-client, because that library renames
every counter family to `<name>_total`, and dashboards built on Triton query the names Triton uses
(`nv_inference_count`, not `nv_inference_count_total`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from nereid.engine import Engine
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.repository.model import ModelVersion
from nereid.statistics import FAILURE_REASONS

Labels = dict[str, str]


@dataclass
class Family:
    name: str
    help: str
    type: str  # "counter" or "gauge"
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.type}"]
        for labels, value in self.samples:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            number = repr(value) if isinstance(value, float) else str(value)
            lines.append(f"{self.name}{{{text}}} {number}" if text else f"{self.name} {number}")
        return "\n".join(lines)


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


def _counter_values(model: ModelVersion) -> dict[str, float]:
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


class MetricsExporter:
    def __init__(self, engine: Engine, cpu_metrics: bool = True) -> None:
        self._engine = engine
        self._cpu = CpuSampler() if cpu_metrics else None

    async def sample_forever(self, interval_s: float) -> None:
        """Refresh the gauges Triton refreshes on --metrics-interval-ms."""
        if self._cpu is None:
            return
        while True:
            self._cpu.sample()
            await asyncio.sleep(interval_s)

    def families(self) -> list[Family]:
        models = self._engine.models.loaded()
        families = [Family(name, text, "counter") for name, text in _COUNTERS[:1]]
        failure = Family(
            "nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter"
        )
        families.append(failure)
        families += [Family(name, text, "counter") for name, text in _COUNTERS[1:]]
        pending = Family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        by_name = {f.name: f for f in families}
        for model in models:
            labels = _labels(model)
            for name, value in _counter_values(model).items():
                by_name[name].samples.append((labels, value))
            for reason in FAILURE_REASONS:
                failure.samples.append(({**labels, "reason": reason}, model.statistics.failures[reason]))
            pending.samples.append((labels, model.scheduler.pending()))
        families.append(pending)
        families += self._cpu_families()
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


def _labels(model: ModelVersion) -> Labels:
    # a model's `metric_tags` become extra labels, as in Triton
    return {**dict(model.config.metric_tags), "model": model.name, "version": model.version_text}


async def handle_metrics(exporter: MetricsExporter, request: HttpRequest) -> HttpResponse:
    """The metrics port answers GET /metrics and nothing else."""
    if request.path != "/metrics":
        return HttpResponse(404, b"Not Found", [(b"content-type", b"text/plain")])
    if request.method != "GET":
        return HttpResponse(405, b"Method Not Allowed", [(b"content-type", b"text/plain")])
    return HttpResponse(
        200, exporter.render(), [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
    )
