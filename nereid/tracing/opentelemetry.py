"""OpenTelemetry trace mode: each sampled request becomes spans exported over OTLP/HTTP by the
OpenTelemetry SDK (the `trace` extra), as Triton's opentelemetry mode makes them:

- `InferRequest`, the request as the frontend received it (its HTTP_* / GRPC_* events), child of the
  client's span when the request carries a W3C `traceparent` header;
- one span per model the request went through, named after the model (REQUEST_START, QUEUE_START and
  REQUEST_END events; attributes triton.model_name, triton.model_version, triton.trace_id,
  triton.trace_parent_id, triton.request_id), an ensemble step's or BLS call's under its caller's;
- `compute` under a model span, per execution (COMPUTE_* events).

This module is imported only in opentelemetry mode; the SDK is imported here alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from nereid.tracing.config import TraceConfig, TraceConfigError
from nereid.tracing.trace import INFER_RESPONSE_COMPLETE, RequestTrace, TraceGroup

if TYPE_CHECKING:
    from nereid.tracing.settings import TraceSetting
    from nereid.types import InferTensor

TRACER_NAME = "triton-server"  # Triton's tracer name
_MISSING = (
    "--trace-config mode=opentelemetry needs the OpenTelemetry SDK and its OTLP/HTTP exporter: "
    "pip install 'nereid[trace]'"
)


def check_available() -> None:
    """Raise TraceConfigError, saying what to install, when the SDK or the exporter is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise TraceConfigError(f"{_MISSING} (cannot import {exc.name})") from None


class SpanExporter:
    """A tracer provider of its own (not the process-wide one) with a batch span processor exporting to
    the configured URL, and the W3C trace context propagator."""

    def __init__(self, config: TraceConfig) -> None:
        check_available()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = TracerProvider(resource=Resource.create(config.resources))
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=config.url),
            max_queue_size=config.bsp("bsp_max_queue_size"),
            schedule_delay_millis=config.bsp("bsp_schedule_delay"),
            max_export_batch_size=config.bsp("bsp_max_export_batch_size"),
        )
        self._provider.add_span_processor(processor)
        self.tracer = self._provider.get_tracer(TRACER_NAME)
        self._propagator = TraceContextTextMapPropagator()
        # Spans take wall-clock times; traces record perf_counter_ns (monotonic) ones.
        self.offset = time.time_ns() - time.perf_counter_ns()

    def extract(self, carrier: Mapping[str, str]) -> Any:
        """The client's span context from a `traceparent` header, or None."""
        from opentelemetry import trace

        if "traceparent" not in carrier:
            return None
        context = self._propagator.extract(carrier)
        return context if trace.get_current_span(context).get_span_context().is_valid else None

    def start(self, setting: TraceSetting, ids: Iterator[int], context: Any) -> RequestTrace:
        trace = SpanTrace(setting, ids, 0, None)
        trace._group = group = SpanGroup(setting, self, context)
        group.add(trace)
        return trace

    def shutdown(self) -> None:
        """Export what is batched and stop (at server shutdown)."""
        self._provider.shutdown()


class SpanGroup(TraceGroup):
    """A sampled request and its children as spans; the `InferRequest` span ends when the last closes."""

    def __init__(self, setting: TraceSetting, exporter: SpanExporter, context: Any) -> None:
        self.setting = setting
        self._members = []  # spans are exported as they end: nothing is kept
        self._open = 0
        self._lock = threading.Lock()
        self.exporter = exporter
        self.root = exporter.tracer.start_span(
            "InferRequest",
            context=context,
            kind=_server_kind(),
            start_time=exporter.offset + time.perf_counter_ns(),
        )

    def add(self, trace: RequestTrace) -> None:
        with self._lock:
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open:
                return
        self.root.end(self.exporter.offset + time.perf_counter_ns())
        self.setting.write_group(())  # counts the trace as collected; nothing is written in this mode


class SpanTrace(RequestTrace):
    """One request through one model, as a model span (and compute spans) under its caller's span."""

    __slots__ = ("_parent", "_span", "_lock")
    has_context = True

    def __init__(
        self, setting: TraceSetting, ids: Iterator[int], parent_id: int, parent: RequestTrace | None
    ) -> None:
        super().__init__(setting, ids, parent_id)
        self._parent = parent
        self._span: Any = None
        self._lock = threading.Lock()

    def _new(self, parent_id: int) -> RequestTrace:
        return SpanTrace(self.setting, self._ids, parent_id, self)

    @property
    def _spans(self) -> SpanGroup:
        return self._group  # type: ignore[return-value]

    def _epoch(self, ns: int) -> int:
        return self._spans.exporter.offset + ns

    def timestamp(self, name: str, ns: int) -> None:
        if self.stamps is None:
            return
        span = self._span if self._span is not None else self._spans.root
        complete = self.complete
        if complete:
            self.complete = 0
            span.add_event(INFER_RESPONSE_COMPLETE, timestamp=self._epoch(complete))
        span.add_event(name, timestamp=self._epoch(ns))

    def now(self, name: str) -> None:
        self.timestamp(name, time.perf_counter_ns())

    def sent(self, start_name: str, start: int, end_name: str) -> None:
        self.timestamp(start_name, start)
        self.now(end_name)
        self.close()

    def admitted(
        self,
        model_name: str,
        model_version: int,
        request_id: str,
        start: int,
        queued: int,
        inputs: Iterable[InferTensor],
    ) -> None:
        self.request_start(model_name, model_version, request_id, start)
        self.queue_start(queued, inputs)

    def request_start(self, model_name: str, model_version: int, request_id: str, ns: int) -> None:
        if self.stamps is None:
            return
        from opentelemetry import trace

        parent = self._parent
        parent_span = (
            parent._span if isinstance(parent, SpanTrace) and parent._span is not None else self._spans.root
        )
        attributes: dict[str, Any] = {
            "triton.model_name": model_name,
            "triton.model_version": model_version,
            "triton.trace_id": self.id,
            "triton.trace_parent_id": self.parent_id,
        }
        if request_id:
            attributes["triton.request_id"] = request_id
        self._span = self._spans.exporter.tracer.start_span(
            model_name,
            context=trace.set_span_in_context(parent_span),
            kind=_server_kind(),
            attributes=attributes,
            start_time=self._epoch(ns),
        )
        self.timestamp("REQUEST_START", ns)

    def queue_start(self, ns: int, inputs: Iterable[InferTensor]) -> None:
        self.timestamp("QUEUE_START", ns)  # tensors are not traced in this mode, as in Triton

    def compute(self, start: int, end: int, back: int) -> None:
        if self.stamps is None or self._span is None:
            return
        from opentelemetry import trace

        now = back
        span = self._spans.exporter.tracer.start_span(
            "compute",
            context=trace.set_span_in_context(self._span),
            kind=_server_kind(),
            start_time=self._epoch(start),
        )
        for name, ns in (
            ("COMPUTE_START", start),
            ("COMPUTE_INPUT_END", start),
            ("COMPUTE_OUTPUT_START", end),
            ("COMPUTE_END", now),
        ):
            span.add_event(name, timestamp=self._epoch(ns))
        span.end(self._epoch(now))

    def request_end(self, outputs: Iterable[InferTensor] = (), ns: int = 0) -> None:
        executed = self.executed
        if executed is not None:
            self.executed = None
            self.compute(*executed)
        if self._span is None:
            return
        now = ns or time.perf_counter_ns()
        self.timestamp("REQUEST_END", now)
        with self._lock:
            span, self._span = self._span, None
        if span is not None:
            span.end(self._epoch(now))

    def context(self) -> str | None:
        """The W3C trace context of this request's span, as Triton hands it to model code (JSON)."""
        span = self._span if self._span is not None else self._spans.root
        context = span.get_span_context()
        traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        document = {"traceparent": traceparent}
        state = context.trace_state.to_header() if context.trace_state else ""
        if state:
            document["tracestate"] = state
        return json.dumps(document)


def _server_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.SERVER
