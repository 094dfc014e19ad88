"""`--trace-config` (and the older `--trace-file/-level/-rate/-count/-log-frequency`) -> TraceConfig.

Triton's rules (docs/user_guide/trace.md): `--trace-config <setting>=<value>` sets a global setting
(`rate`, `level`, `count`, `mode`); `--trace-config <mode>,<setting>=<value>` a setting of one mode:
`triton` (`file`, `log-frequency`) or `opentelemetry` (`url`, `resource`, `bsp_max_queue_size`,
`bsp_schedule_delay`, `bsp_max_export_batch_size`). A `--trace-config` value wins over its deprecated
flag; `level` may be given several times (TIMESTAMPS and TENSORS together), and OFF anywhere turns
tracing off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Trace levels, as bits (TRITONSERVER_TRACE_LEVEL_*).
LEVEL_OFF = 0
LEVEL_TIMESTAMPS = 0x4
LEVEL_TENSORS = 0x8

MODES = ("triton", "opentelemetry")
# Batch span processor settings and their defaults, each also read from its OTEL_* variable.
BSP_DEFAULTS = (
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", 5000),
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
)
DEFAULT_OTLP_URL = "http://localhost:4318/v1/traces"


class TraceConfigError(ValueError):
    """A --trace-config value tritonserver refuses at start-up."""


@dataclass(frozen=True)
class TraceConfig:
    """The trace settings the server starts with: the global setting, and the mode's own options."""

    level: int = LEVEL_OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = "triton"
    # The mode's `--trace-config <mode>,<key>=<value>` items in command-line order (Triton lists the ones
    # other than file and log-frequency in trace setting answers); the batch span processor defaults are
    # appended in opentelemetry mode.
    mode_options: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return self._last("url", DEFAULT_OTLP_URL)

    @property
    def resources(self) -> dict[str, str]:
        """OpenTelemetry resource attributes: service.name, then each `resource=<key>=<value>`."""
        attributes = {"service.name": "triton-inference-server"}
        for key, value in self.mode_options:
            if key == "resource":
                name, _, text = value.partition("=")
                attributes[name] = text
        return attributes

    def bsp(self, name: str) -> int:
        return int(self._last(name, "0"))

    def _last(self, key: str, default: str) -> str:
        values = [v for k, v in self.mode_options if k == key]
        return values[-1] if values else default


@dataclass
class _Flags:
    """The deprecated flags, as given (None: not given)."""

    file: str | None = None
    levels: list[str] = field(default_factory=list)
    rate: str | None = None
    count: str | None = None
    log_frequency: str | None = None


def parse_level(text: str) -> int:
    lowered = text.strip().lower()
    if lowered in ("false", "off"):
        return LEVEL_OFF
    if lowered in ("true", "on", "min", "max", "timestamps"):
        return LEVEL_TIMESTAMPS
    if lowered == "tensors":
        return LEVEL_TENSORS
    raise TraceConfigError(f"invalid value for trace level option: {lowered}")


def _mode(text: str) -> str:
    lowered = text.lower()
    if lowered not in MODES:
        raise TraceConfigError(
            f'invalid value for trace mode option: {lowered}. Available options are "triton" and "opentelemetry"'
        )
    return lowered


def _integer(text: str, what: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TraceConfigError(f'Bad option: "{what}".\ninvalid value: {text}') from None
    if not low <= value <= high:
        raise TraceConfigError(f'Bad option: "{what}".\nvalue out of range: {text}')
    return value


def _split(item: str) -> tuple[str, str, str]:
    """(mode or "", setting, value) of one --trace-config item."""
    name, comma, rest = item.partition(",")
    if comma and not name:
        raise TraceConfigError(
            "No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> or "
            f"<setting>=<value>. Got {item}"
        )
    mode = _mode(name) if comma else ""
    pair = rest if comma else item
    setting, equals, value = pair.partition("=")
    if not equals or not setting or not value:
        raise TraceConfigError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {item}"
        )
    return mode, setting, value


def parse_trace_config(
    items: Sequence[str],
    *,
    file: str | None = None,
    levels: Sequence[str] = (),
    rate: str | None = None,
    count: str | None = None,
    log_frequency: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[TraceConfig, list[str]]:
    """The start-up trace settings and the warnings tritonserver prints for them (deprecated flags)."""
    environ = os.environ if environ is None else environ
    warnings: list[str] = []
    by_mode: dict[str, list[tuple[str, str]]] = {"": [], "triton": [], "opentelemetry": []}
    for item in items:
        mode, setting, value = _split(item)
        by_mode[mode].append((setting, value))
    flags = _Flags(file, list(levels), rate, count, log_frequency)
    for flag, given in (
        ("--trace-file", flags.file),
        ("--trace-level", flags.levels or None),
        ("--trace-rate", flags.rate),
        ("--trace-count", flags.count),
        ("--trace-log-frequency", flags.log_frequency),
    ):
        if given is not None:
            warnings.append(f"{flag} is deprecated: use --trace-config instead")
    level = LEVEL_OFF
    disabled = False
    for text in flags.levels:
        parsed = parse_level(text)
        disabled |= parsed == LEVEL_OFF
        level |= parsed
    values = {
        "rate": _integer(flags.rate, "--trace-rate", 0, 2**31 - 1) if flags.rate is not None else 1000,
        "count": _integer(flags.count, "--trace-count", -(2**31), 2**31 - 1)
        if flags.count is not None
        else -1,
        "log_frequency": (
            _integer(flags.log_frequency, "--trace-log-frequency", 0, 2**31 - 1)
            if flags.log_frequency is not None
            else 0
        ),
    }
    mode = "triton"
    for setting, value in by_mode[""]:
        what = f"--trace-config {setting}"
        if setting == "rate":
            values["rate"] = _integer(value, what, 0, 2**31 - 1)
        elif setting == "count":
            values["count"] = _integer(value, what, -(2**31), 2**31 - 1)
        elif setting == "level":
            try:
                parsed = parse_level(value)
            except TraceConfigError as exc:
                raise TraceConfigError(f'Bad option: "{what}".\n{exc}') from None
            disabled |= parsed == LEVEL_OFF
            level |= parsed
        elif setting == "mode":
            try:
                mode = _mode(value)
            except TraceConfigError as exc:
                raise TraceConfigError(f'Bad option: "{what}".\n{exc}') from None
    trace_file = flags.file or ""
    options: list[tuple[str, str]]
    if mode == "triton":
        options = by_mode["triton"]
        for setting, value in options:
            if setting == "file":
                trace_file = value
            elif setting == "log-frequency":
                values["log_frequency"] = _integer(value, f"--trace-config triton,{setting}", 0, 2**31 - 1)
    else:
        if flags.file is not None:
            warnings.append("--trace-file is ignored in opentelemetry trace mode")
        if flags.log_frequency is not None:
            warnings.append("--trace-log-frequency is ignored in opentelemetry trace mode")
        options = _opentelemetry_options(by_mode["opentelemetry"], environ)
    if disabled:
        level = LEVEL_OFF
    config = TraceConfig(
        level=level,
        rate=values["rate"],
        count=values["count"],
        log_frequency=values["log_frequency"],
        file=trace_file,
        mode=mode,
        mode_options=tuple(options),
    )
    return config, warnings


def _opentelemetry_options(given: list[tuple[str, str]], environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The opentelemetry items with the batch span processor's numbers checked, and its defaults (or their
    OTEL_BSP_* variables) appended for those not given."""
    options = []
    names = {name for name, _, _ in BSP_DEFAULTS}
    for setting, value in given:
        if setting in names:
            value = str(_integer(value, f"--trace-config opentelemetry,{setting}", 0, 2**32 - 1))
        options.append((setting, value))
    for name, variable, default in BSP_DEFAULTS:
        if name not in {s for s, _ in given}:
            text = environ.get(variable, str(default))
            options.append((name, str(_integer(text, variable, 0, 2**32 - 1))))
    return options
