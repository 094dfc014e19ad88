"""Everything the console reads from the server, in one place.

Only the engine's public methods (statistics, model_config) and the metrics registry are used, so that
a change of the engine's interface is adapted here and nowhere else in the console. Model control and
inference do not pass through here at all: the console's page calls the standard v2 API for them.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from nereid.core.engine_client import EngineClient
from nereid.frontends import metrics  # a module import: it imports the HTTP frontend, which mounts this
from nereid.frontends.console.hints import BatchingSetup, BatchingWindow, Hint, batching_hint

HINT_WINDOW_S = 10.0  # the hint reads the last this-many seconds of each model's statistics
_CPU_MIN_INTERVAL_S = 0.5  # several open consoles share one CPU reading per half second
_HISTOGRAMS = ("nereid_inference_request_duration_us", "nereid_inference_queue_delay_us")

Key = tuple[str, str]  # model name, version


class ConsoleSource:
    """Snapshots of the server for the console's live view: cumulative counters per model version,
    latency histograms, the batching hint, and host CPU and memory."""

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine
        self._metrics = metrics.MetricsExporter(engine, cpu_metrics=False)
        self._cpu = metrics.CpuSampler()
        self._cpu_at = 0.0
        self._process_cpu = (time.monotonic(), _process_seconds())
        self._process_utilization = 0.0
        # (monotonic time, counters per model) of recent snapshots, for the hint's window
        self._history: collections.deque[tuple[float, dict[Key, BatchingWindow]]] = collections.deque()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        stats = self._engine.statistics()["model_stats"]
        histograms = self._histograms()
        counters: dict[Key, BatchingWindow] = {}
        models = []
        for entry in stats:
            key = (entry["name"], entry["version"])
            inference = entry["inference_stats"]
            # cumulative since the version loaded; a hint subtracts two of these (their times are in _history)
            counters[key] = BatchingWindow(
                seconds=0.0,
                requests=inference["success"]["count"],
                executions=entry["execution_count"],
                inferences=entry["inference_count"],
                request_ns=inference["success"]["ns"],
                queue_ns=inference["queue"]["ns"],
            )
            models.append(
                {
                    "name": key[0],
                    "version": key[1],
                    "inference_count": entry["inference_count"],
                    "execution_count": entry["execution_count"],
                    "stats": {k: inference[k] for k in ("success", "fail", "queue", "compute_infer")},
                    "batch_sizes": {
                        str(b["batch_size"]): b["compute_infer"]["count"] for b in entry["batch_stats"]
                    },
                    "pending": histograms.get(key, {}).get("pending", 0),
                    "request_duration_us": histograms.get(key, {}).get(_HISTOGRAMS[0], []),
                    "queue_delay_us": histograms.get(key, {}).get(_HISTOGRAMS[1], []),
                }
            )
        self._remember(now, counters)
        for model in models:
            hint = self._hint((model["name"], model["version"]), now)
            model["hint"] = {"code": hint.code, "values": hint.values} if hint is not None else None
        return {"time": time.time(), "server": self._server(now), "models": models}

    def _histograms(self) -> dict[Key, dict[str, Any]]:
        """Cumulative buckets `[[upper bound, count], ...]` per model, and its pending requests, read
        from the metrics registry (the same numbers Prometheus scrapes)."""
        found: dict[Key, dict[str, Any]] = collections.defaultdict(dict)
        for family in self._metrics.families():
            if family.name == "nv_inference_pending_request_count":
                for labels, value in family.samples:
                    found[(labels["model"], labels["version"])]["pending"] = value
            elif family.name in _HISTOGRAMS:
                for suffix, labels, value in family.suffixed:
                    if suffix == "_bucket":
                        key = (labels["model"], labels["version"])
                        bound = float(labels["le"]) if labels["le"] != "+Inf" else None
                        found[key].setdefault(family.name, []).append([bound, value])
        return found

    def _remember(self, now: float, counters: dict[Key, BatchingWindow]) -> None:
        self._history.append((now, counters))
        while len(self._history) > 2 and self._history[1][0] <= now - HINT_WINDOW_S:
            self._history.popleft()

    def _hint(self, key: Key, now: float) -> Hint | None:
        then_at, then = self._history[0]
        current = self._history[-1][1][key]
        before = then.get(key)
        if before is None or now - then_at < 1.0:
            return None  # not a second of history yet
        window = BatchingWindow(
            seconds=now - then_at,
            requests=current.requests - before.requests,
            executions=current.executions - before.executions,
            inferences=current.inferences - before.inferences,
            request_ns=current.request_ns - before.request_ns,
            queue_ns=current.queue_ns - before.queue_ns,
        )
        if window.requests < 0:  # the version reloaded and its counters restarted
            return None
        return batching_hint(self._setup(*key), window)

    def _setup(self, name: str, version: str) -> BatchingSetup:
        config = self._engine.model_config(name, version)
        batcher = config.get("dynamic_batching") or config.get("sequence_batching")
        return BatchingSetup(
            max_batch_size=int(config.get("max_batch_size", 0)),
            dynamic_batching=batcher is not None,
            max_queue_delay_us=int((batcher or {}).get("max_queue_delay_microseconds", 0)),
            preferred_batch_sizes=tuple(
                int(n) for n in (config.get("dynamic_batching") or {}).get("preferred_batch_size", [])
            ),
            instances=sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1,
            ensemble=config.get("platform") == "ensemble",
        )

    def _server(self, now: float) -> dict[str, Any]:
        if now - self._cpu_at >= _CPU_MIN_INTERVAL_S:
            self._cpu.sample()
            self._cpu_at = now
            then, seconds = self._process_cpu
            current = _process_seconds()
            if now > then:
                self._process_utilization = (current - seconds) / (now - then)
            self._process_cpu = (now, current)
        memory = self._cpu.memory()
        return {
            "cpu_utilization": self._cpu.utilization,
            "cpu_count": os.cpu_count() or 1,
            "memory_total_bytes": memory[0] if memory else None,
            "memory_used_bytes": memory[1] if memory else None,
            "process_cpu_utilization": self._process_utilization,  # in cores: 1.0 is one core busy
            "process_memory_bytes": _resident_bytes(),
        }


def _process_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
