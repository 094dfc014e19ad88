"""--trace-config and the older --trace-* flags, as tritonserver reads them."""

from __future__ import annotations

import pytest

from nereid.cli import parse_settings
from nereid.tracing.config import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    TraceConfigError,
    parse_trace_config,
)


def test_defaults_are_tritons() -> None:
    config, warnings = parse_trace_config([], environ={})
    assert (config.level, config.rate, config.count, config.log_frequency, config.file, config.mode) == (
        LEVEL_OFF,
        1000,
        -1,
        0,
        "",
        "triton",
    )
    assert warnings == []


def test_global_and_triton_settings() -> None:
    config, _ = parse_trace_config(
        [
            "triton,file=/tmp/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "count=7",
        ],
        environ={},
    )
    assert config.level == LEVEL_TIMESTAMPS | LEVEL_TENSORS
    assert (config.rate, config.count, config.log_frequency, config.file) == (100, 7, 50, "/tmp/t.json")


def test_off_anywhere_turns_tracing_off() -> None:
    config, _ = parse_trace_config(["level=TIMESTAMPS", "level=OFF"], environ={})
    assert config.level == LEVEL_OFF


def test_trace_config_wins_over_the_deprecated_flags() -> None:
    config, warnings = parse_trace_config(
        ["rate=5", "triton,file=new.json"], file="old.json", rate="9", levels=["min"], environ={}
    )
    assert (config.rate, config.file, config.level) == (5, "new.json", LEVEL_TIMESTAMPS)
    assert any("--trace-file is deprecated" in w for w in warnings)


def test_opentelemetry_options_and_batch_span_processor_defaults() -> None:
    config, _ = parse_trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,url=http://collector:4318/v1/traces",
            "opentelemetry,resource=service.name=nereid",
            "opentelemetry,resource=team=vision",
            "opentelemetry,bsp_schedule_delay=100",
        ],
        environ={"OTEL_BSP_MAX_QUEUE_SIZE": "64"},
    )
    assert config.mode == "opentelemetry"
    assert config.url == "http://collector:4318/v1/traces"
    assert config.resources == {"service.name": "nereid", "team": "vision"}
    assert (config.bsp("bsp_schedule_delay"), config.bsp("bsp_max_queue_size")) == (100, 64)
    assert config.bsp("bsp_max_export_batch_size") == 512


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (",rate=1", "No trace mode specified"),
        ("rate", "option format is '<trace mode>,<setting>=<value>'. Got rate"),
        ("jaeger,url=x", 'invalid value for trace mode option: jaeger. Available options are "triton"'),
        ("level=LOUD", "invalid value for trace level option: loud"),
        ("rate=often", 'Bad option: "--trace-config rate"'),
        ("opentelemetry,bsp_max_queue_size=-1", "bsp_max_queue_size"),
    ],
)
def test_bad_items_are_refused(item: str, message: str) -> None:
    with pytest.raises(TraceConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_trace_config(["mode=opentelemetry", item] if "bsp" in item else [item], environ={})


def test_command_line_reaches_the_settings() -> None:
    settings, warnings = parse_settings(
        ["--model-repository=/m", "--trace-config=level=TIMESTAMPS", "--trace-config", "triton,file=t.json"]
    )
    assert (settings.trace.level, settings.trace.file) == (LEVEL_TIMESTAMPS, "t.json")
    assert not any("trace" in w for w in warnings)


def test_bad_command_line_item_stops_the_server() -> None:
    with pytest.raises(SystemExit, match="invalid value for trace mode option"):
        parse_settings(["--model-repository=/m", "--trace-config=mode=zipkin"])
