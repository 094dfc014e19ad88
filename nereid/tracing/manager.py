"""The trace manager: the global and per-model trace settings, sampling, and where traces go.

Frontends ask `active` first (one attribute read per request; false while every setting's level is OFF)
and only then `sample` a trace for the request. The admission path and the instance pool record the
request's timestamps on the trace the request carries (`InferRequest.trace`, `BackendRequest.trace`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from nereid.tracing.config import LEVEL_OFF, TraceConfig
from nereid.tracing.settings import SettingUpdate, TraceFile, TraceSetting
from nereid.tracing.trace import RequestTrace

# One answer of the trace extension: setting name -> value, a list for trace_level (and for a setting
# given more than once), a string otherwise; in Triton's order.
SettingAnswer = list[tuple[str, str | list[str]]]


class TraceManager:
    def __init__(self, config: TraceConfig) -> None:
        self.config = config
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._files: dict[str, TraceFile] = {}
        file = self._file(config.file)
        self._default = TraceSetting(
            config.level, config.rate, config.count, config.log_frequency, file, config.mode
        )
        self._global = TraceSetting(
            config.level, config.rate, config.count, config.log_frequency, file, config.mode
        )
        self._models: dict[str, TraceSetting] = {}
        self._fallback: set[str] = set()  # models whose settings mirror some global fields
        self._exporter: Any = None
        if config.mode == "opentelemetry":
            from nereid.tracing.opentelemetry import SpanExporter

            self._exporter = SpanExporter(config)
        self.active = config.level != LEVEL_OFF

    # sampling
    def sample(
        self,
        model_name: str,
        carrier: Mapping[str, str] | Iterable[tuple[str, Any]] | None = None,
        received: tuple[str | int, ...] = (),
    ) -> RequestTrace | None:
        """The trace of a request to `model_name`, when this request is sampled; else None. `received`:
        the frontend's receive timestamps (name, ns, name, ns), its first. In opentelemetry mode a request
        whose headers (`carrier`: a mapping, or gRPC metadata's pairs) carry a W3C `traceparent` is always
        traced, as a child of the client's span."""
        setting = self._models.get(model_name, self._global)
        exporter = self._exporter
        if exporter is None:  # Triton mode: nothing forces a sample, and a setting OFF samples nothing
            return setting.start(self._ids, received)
        if setting.level == LEVEL_OFF:
            return None
        context = None
        if exporter is not None and carrier:
            context = exporter.extract(carrier if isinstance(carrier, Mapping) else dict(carrier))
        if not setting.sample(context is not None):
            return None
        trace = exporter.start(setting, self._ids, context)
        for index in range(0, len(received), 2):
            trace.timestamp(received[index], received[index + 1])  # type: ignore[arg-type]
        return trace

    # the trace extension
    def setting(self, model_name: str = "") -> SettingAnswer:
        """The setting in force for `model_name` ("" for the global one), as the trace extension shows it."""
        setting = self._models.get(model_name, self._global) if model_name else self._global
        levels = []
        if setting.level == LEVEL_OFF:
            levels.append("OFF")
        else:
            if setting.timestamps:
                levels.append("TIMESTAMPS")
            if setting.tensors:
                levels.append("TENSORS")
        answer: SettingAnswer = [
            ("trace_level", levels),
            ("trace_rate", str(setting.rate)),
            ("trace_count", str(setting.count)),
        ]
        if setting.mode == "triton":
            answer.append(("log_frequency", str(setting.log_frequency)))
            answer.append(("trace_file", setting.file.name))
        answer.append(("trace_mode", setting.mode))
        for key, value in self.config.mode_options:
            if key not in ("file", "log-frequency"):
                answer.append((key, value))
        return answer

    def update(self, model_name: str, update: SettingUpdate) -> None:
        """Apply an update to the global setting ("") or to a model's; a global update carries over to
        the model settings that mirror global fields. Raises ValueError for a setting that would trace
        but cannot (Triton's only invalid setting allowed is one that disables tracing)."""
        with self._lock:
            self._update(model_name, update)
            if not model_name:
                for name in list(self._fallback):
                    self._update(name, SettingUpdate())
            self.active = self._global.level != LEVEL_OFF or any(
                s.level != LEVEL_OFF for s in self._models.values()
            )

    def _update(self, model_name: str, update: SettingUpdate) -> None:
        if model_name:
            current = self._models.get(model_name)
            fallback = self._global
        else:
            current = self._global
            fallback = self._default
        values: dict[str, int] = {}
        specified = set()
        for field in ("level", "rate", "count", "log_frequency"):
            new = getattr(update, field)
            if field not in update.cleared and (
                new is not None or (current is not None and field in current.specified)
            ):
                specified.add(field)
                values[field] = new if new is not None else getattr(current, field)
            else:
                values[field] = getattr(fallback, field)
        if model_name:
            if not specified:  # nothing of its own left: the model follows the global setting
                old = self._models.pop(model_name, None)
                self._fallback.discard(model_name)
                if old is not None:
                    old.retire()
                return
            # Triton counts the trace file among the fields, and no update specifies it: a model setting
            # always mirrors some global field, and follows global updates.
            self._fallback.add(model_name)
        setting = TraceSetting(
            values["level"],
            values["rate"],
            values["count"],
            values["log_frequency"],
            fallback.file,
            fallback.mode,
            frozenset(specified),
        )
        if not setting.valid and setting.level != LEVEL_OFF:
            raise ValueError(f"Attempting to set invalid trace setting :{setting.reason}")
        old = self._models.get(model_name) if model_name else self._global
        if model_name:
            self._models[model_name] = setting
        else:
            self._global = setting
        if old is not None:
            old.retire()

    def _file(self, name: str) -> TraceFile:
        file = self._files.get(name)
        if file is None:
            file = self._files[name] = TraceFile(name)
        return file

    # stopping
    def close(self) -> None:
        """At shutdown: write every trace kept, close the trace files, and export the last spans."""
        with self._lock:
            self.active = False
            settings = [self._global, *self._models.values()]
        for setting in settings:
            setting.retire()
        for file in list(self._files.values()):
            file.close()
        if self._exporter is not None:
            self._exporter.shutdown()
