"""Triton's trace extension: trace settings (global and per model), sampling, and the traces themselves,
written as Triton's JSON trace file or exported as OpenTelemetry spans."""

from nereid.tracing.config import TraceConfig, TraceConfigError, parse_trace_config
from nereid.tracing.manager import SettingAnswer, TraceManager
from nereid.tracing.settings import SettingUpdate
from nereid.tracing.trace import RequestTrace

__all__ = [
    "RequestTrace",
    "SettingAnswer",
    "SettingUpdate",
    "TraceConfig",
    "TraceConfigError",
    "TraceManager",
    "parse_trace_config",
]
