"""Command line with tritonserver's flag names and defaults -> ServerSettings."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nereid.cli_help import NO_EFFECT, Formatter, Parser, describe, unknown_flag
from nereid.log_settings import FORMATS, LogSettings, escape_messages
from nereid.repository.remote.location import is_remote
from nereid.settings import (
    API_GROUPS,
    CacheSettings,
    GrpcOptions,
    MetricsConfig,
    ResourceLimit,
    RestrictedApi,
    ServerSettings,
)
from nereid.tracing.config import TraceConfig, TraceConfigError, parse_trace_config

# Triton flags that a later version of Nereid implements. They are accepted so existing command lines
# keep working, and each one given is reported at start-up as having no effect yet.
NOT_YET_SUPPORTED = (
    "--http-thread-count",
    "--pinned-memory-pool-byte-size",
    "--cuda-memory-pool-byte-size",
    "--repoagent-directory",
    "--min-supported-compute-capability",
    "--buffer-manager-thread-count",
    "--host-policy",
    "--cache-directory",
)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _positive(kind: Callable[[str], float], zero: bool = False) -> Callable[[str], float]:
    """An argparse type: a number of `kind` above 0 (or at 0, with `zero`)."""

    def parse(value: str) -> float:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{value}'") from None
        if number < 0 or (number == 0 and not zero):
            raise argparse.ArgumentTypeError(
                f"expected a number above {'or at ' if zero else ''}0, got '{value}'"
            )
        return number

    return parse


def _request_compression(value: str) -> frozenset[str]:
    names = frozenset(name.strip().lower() for name in value.split(","))
    if not names or not names <= {"gzip", "deflate"}:
        raise argparse.ArgumentTypeError(f"expected gzip, deflate or gzip,deflate, got '{value}'")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="nereid",
        description="Serve a Triton model repository over Triton's HTTP/REST and gRPC protocols.",
        allow_abbrev=False,
        formatter_class=Formatter,
    )
    p.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        metavar="DIR",
        help="model repository folder, or s3://, gs:// or as:// URL (repeatable)",
    )
    p.add_argument("--id", default="triton", help="server identifier reported by server metadata")
    p.add_argument("--allow-http", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--http-address", default="0.0.0.0")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--reuse-http-port", type=_bool, default=False, metavar="BOOL")
    p.add_argument("--http-max-input-size", type=int, default=64 * 1024 * 1024, metavar="BYTES")
    p.add_argument("--http-header-timeout-secs", type=_positive(float), default=30.0, metavar="SECONDS")
    p.add_argument("--http-body-timeout-secs", type=_positive(float), default=30.0, metavar="SECONDS")
    p.add_argument("--http-body-min-rate", type=_positive(int, zero=True), default=1024, metavar="BYTES")
    p.add_argument("--http-max-connections", type=_positive(int), default=None, metavar="N")
    p.add_argument("--max-model-instances", type=_positive(int), default=None, metavar="N")
    p.add_argument("--allow-grpc", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--grpc-address", default="0.0.0.0")
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--reuse-grpc-port", type=_bool, default=False, metavar="BOOL")
    p.add_argument("--grpc-core", choices=("auto", "native", "aio"), default="auto")
    p.add_argument(
        "--grpc-request-compression",
        type=_request_compression,
        default=None,
        metavar="LIST",
    )
    p.add_argument("--grpc-use-ssl", type=_bool, default=False, metavar="BOOL")
    p.add_argument("--grpc-use-ssl-mutual", type=_bool, default=False, metavar="BOOL")
    p.add_argument("--grpc-server-cert", default="", metavar="FILE")
    p.add_argument("--grpc-server-key", default="", metavar="FILE")
    p.add_argument("--grpc-root-cert", default="", metavar="FILE")
    p.add_argument(
        "--grpc-infer-response-compression-level", default="none", choices=["none", "low", "medium", "high"]
    )
    p.add_argument("--grpc-keepalive-time", type=int, default=7_200_000, metavar="MS")
    p.add_argument("--grpc-keepalive-timeout", type=int, default=20_000, metavar="MS")
    p.add_argument("--grpc-keepalive-permit-without-calls", type=_bool, default=False, metavar="BOOL")
    p.add_argument("--grpc-http2-max-pings-without-data", type=int, default=2)
    p.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data", type=int, default=300_000, metavar="MS"
    )
    p.add_argument("--grpc-http2-max-ping-strikes", type=int, default=2)
    p.add_argument("--grpc-max-connection-age", type=int, default=None, metavar="MS")
    p.add_argument("--grpc-max-connection-age-grace", type=int, default=None, metavar="MS")
    p.add_argument("--allow-metrics", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--metrics-address", default="0.0.0.0")
    p.add_argument("--metrics-port", type=int, default=8002)
    # Triton takes the mode in any case (its QA scripts pass POLL and EXPLICIT)
    p.add_argument(
        "--model-control-mode", type=str.lower, default="none", choices=["none", "explicit", "poll"]
    )
    p.add_argument("--load-model", action="append", default=[], metavar="NAME", help="'*' loads every model")
    p.add_argument("--metrics-interval-ms", type=int, default=2000)
    p.add_argument("--allow-cpu-metrics", type=_bool, default=True, metavar="BOOL")
    p.add_argument(
        "--allow-gpu-metrics",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="the nv_gpu_* gauges, on a CUDA host with nvidia-ml-py",
    )
    p.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="counter_latencies, histogram_latencies, summary_latencies (BOOL) or summary_quantiles "
        "(Q:ERROR[,Q:ERROR...])",
    )
    p.add_argument(
        "--allow-client-shm",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="let clients register shared-memory regions (off by default, as in current Triton)",
    )
    p.add_argument("--http-header-forward-pattern", default="", metavar="REGEX")
    p.add_argument("--grpc-header-forward-pattern", default="", metavar="REGEX")
    p.add_argument(
        "--allow-console", type=_bool, default=True, metavar="BOOL", help="the web console at /console"
    )
    p.add_argument(
        "--allow-openai",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="the OpenAI API (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models)",
    )
    p.add_argument(
        "--openai-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the OpenAI API on a port of its own (on --http-address) instead of the HTTP port",
    )
    p.add_argument("--repository-poll-secs", type=int, default=15, metavar="SECONDS")
    p.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="API[,API...]:HEADER=VALUE",
        help="require metadata 'triton-grpc-protocol-HEADER' on these RPC groups",
    )
    p.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="API[,API...]:HEADER=VALUE",
        help="require a header on these API groups",
    )
    p.add_argument("--model-config-name", default="")
    p.add_argument("--disable-auto-complete-config", action="store_true")
    p.add_argument(
        "--strict-model-config",
        type=_bool,
        default=None,
        metavar="BOOL",
        help="deprecated: true is the same as --disable-auto-complete-config",
    )
    p.add_argument("--backend-config", action="append", default=[], metavar="[BACKEND,]KEY=VALUE")
    p.add_argument(
        "--backend-directory",
        default=None,
        metavar="DIR",
        help="where Python-based backends live: DIR/<backend>/model.py serves models of that backend",
    )
    p.add_argument("--model-load-thread-count", type=int, default=4)
    p.add_argument(
        "--model-load-retry-count",
        type=int,
        default=0,
        metavar="COUNT",
        help="how many more times a model that fails to load is tried",
    )
    p.add_argument(
        "--model-namespacing",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="know each model by its repository and name, so that repositories may share model names",
    )
    p.add_argument("--strict-readiness", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--exit-on-error", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--exit-timeout-secs", type=int, default=30)
    p.add_argument("--cpu-scheduling", choices=("batch", "normal"), default="batch")
    p.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL")
    p.add_argument("--log-info", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--log-warning", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--log-error", type=_bool, default=True, metavar="BOOL")
    p.add_argument("--log-format", choices=FORMATS, default="default")
    p.add_argument("--log-file", default="", metavar="FILE")
    p.add_argument("--rate-limit", choices=("off", "execution_count"), default="off")
    p.add_argument("--cache-config", action="append", default=[], metavar="CACHE,KEY=VALUE")
    p.add_argument("--response-cache-byte-size", type=int, default=None)
    p.add_argument("--rate-limit-resource", action="append", default=[], metavar="NAME:COUNT[:DEVICE]")
    p.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[MODE,]KEY=VALUE",
        help="tracing: rate, level, count, mode; triton,file / log-frequency; opentelemetry,url / resource / bsp_*",
    )
    for flag in ("--trace-file", "--trace-rate", "--trace-count", "--trace-log-frequency"):
        p.add_argument(flag, default=None, help="deprecated: use --trace-config")
    p.add_argument("--trace-level", action="append", default=[], help="deprecated: use --trace-config level=")
    for flag in (*NOT_YET_SUPPORTED, *NO_EFFECT):
        p.add_argument(flag, action="append", default=None)
    describe(p, NOT_YET_SUPPORTED)
    return p


def _given(values: list[str] | None) -> bool:
    """Given, and not merely switched off (--allow-sagemaker=false asks for nothing Nereid lacks)."""
    return values is not None and any(v.strip().lower() not in ("false", "0", "off") for v in values)


def _joined_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--flag VALUE` as `--flag=VALUE`, so that a value beginning with '-' (`--model-load-gpu-limit -1:0.6`)
    is read as the flag's value, as tritonserver reads it, and not taken for another flag."""
    joined: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        action = parser._option_string_actions.get(token)
        takes_value = (
            action is not None and action.nargs is None and action.option_strings[0].startswith("--")
        )
        if takes_value and not isinstance(action, argparse._StoreConstAction):
            value = next(tokens, None)
            if (
                value is not None
                and value.startswith("-")
                and value.partition("=")[0] not in parser._option_string_actions
            ):
                joined.append(f"{token}={value}")
                continue
            joined.append(token)
            if value is not None:
                joined.append(value)
            continue
        joined.append(token)
    return joined


def _check_gpu_limit(item: str) -> None:
    """--model-load-gpu-limit <device>:<fraction>: refused when malformed, as tritonserver refuses it (the
    limit itself has no effect here)."""
    device, sep, fraction = item.partition(":")
    try:
        device_id, limit = int(device), float(fraction)
    except ValueError:
        raise SystemExit(
            f"nereid: --model-load-gpu-limit expects <device ID>:<fraction>, got '{item}'"
        ) from None
    if not sep:
        raise SystemExit(f"nereid: --model-load-gpu-limit expects <device ID>:<fraction>, got '{item}'")
    if device_id < 0:
        raise SystemExit(f"nereid: --model-load-gpu-limit expects device ID >= 0, got {device}")
    if not 0.0 <= limit <= 1.0:
        raise SystemExit(
            f"nereid: --model-load-gpu-limit expects limit fraction to be in range [0.0, 1.0], got {fraction}"
        )


def _metrics_config(items: Sequence[str]) -> tuple[MetricsConfig, list[str]]:
    """--metrics-config items, and a warning per key this version does not act on."""
    values: dict[str, Any] = {}
    warnings = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"nereid: --metrics-config expects key=value, got '{item}'")
        if key in ("counter_latencies", "summary_latencies", "histogram_latencies"):
            try:
                values[key] = _bool(value)
            except argparse.ArgumentTypeError as exc:
                raise SystemExit(f"nereid: --metrics-config {key}: {exc}") from None
        elif key == "summary_quantiles":
            values[key] = _quantiles(value)
        else:
            warnings.append(f"--metrics-config {key} is not a setting Nereid acts on; it has no effect")
    return MetricsConfig(**values), warnings


# A number at the start of a text, as C's strtod reads one (what follows it is ignored)
_LEADING_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _quantiles(text: str) -> tuple[float, ...]:
    """`0.5:0.05,0.9:0.01`: quantiles and their allowed errors; the errors are not needed here (the
    quantiles are computed exactly). Each number is read from its start, as tritonserver reads it, so
    that an error such as `0.0.1` is taken (as 0.0) rather than refused."""
    quantiles = []
    for pair in text.split(","):
        quantile, _, error = pair.partition(":")
        q_match, error_match = _LEADING_NUMBER.match(quantile), _LEADING_NUMBER.match(error or "0")
        q = float(q_match.group()) if q_match and error_match else -1.0
        if not 0.0 <= q <= 1.0:
            raise SystemExit(
                f"nereid: --metrics-config summary_quantiles expects <quantile>:<error>[,...] with quantiles "
                f"between 0 and 1, got '{text}'"
            )
        quantiles.append(q)
    return tuple(quantiles)


def _restricted_apis(items: Sequence[str], flag: str, kind: str) -> tuple[RestrictedApi, ...]:
    """Each `<group>[,<group>...]:<header>=<value>`, as tritonserver takes them: a group in one item only.
    `kind` is Triton's word for a group in its refusals ("api" over HTTP, "protocol" over gRPC), which
    its test scripts look for."""
    # the OpenAI routes are HTTP's alone
    known = [g for g in API_GROUPS if flag == "--http-restricted-api" or g != "openai"]
    result = []
    seen: set[str] = set()
    for item in items:
        groups_text, colon, pair = item.partition(":")
        header, equals, value = pair.partition("=")
        if not colon or not equals or not header:
            raise SystemExit(f"nereid: {flag} expects <{kind}>[,<{kind}>...]:<header>=<value>, got '{item}'")
        groups = [g.strip() for g in groups_text.split(",")]
        for group in groups:
            if group not in known:
                raise SystemExit(
                    f"nereid: {flag}: unknown restricted {kind} '{group}' (known: {', '.join(known)})"
                )
            if group in seen:
                raise SystemExit(
                    f"nereid: {flag}: restricted {kind} '{group}' can not be specified in multiple config "
                    "groups: each group of APIs takes one header"
                )
            seen.add(group)
        result.append(RestrictedApi(frozenset(groups), header.strip().lower(), value))
    return tuple(result)


def parse_settings(argv: Sequence[str]) -> tuple[ServerSettings, list[str]]:
    """Settings, plus one warning per flag that was given but has no effect in this version."""
    parser = build_parser()
    typo = unknown_flag(argv, parser)
    if typo is not None:
        print(typo, file=sys.stderr)
        raise SystemExit(2)
    args = parser.parse_args(_joined_values(argv, parser))
    if args.http_max_input_size <= 0:
        # Triton's words, which its test scripts look for
        raise SystemExit("Error: --http-max-input-size must be greater than 0.")
    for item in args.model_load_gpu_limit or ():
        _check_gpu_limit(item)
    warnings = [
        f"{flag} is not supported yet and has no effect"
        for flag in NOT_YET_SUPPORTED
        if getattr(args, flag.lstrip("-").replace("-", "_")) is not None
    ]
    warnings += [
        f"{flag} has no effect: {reason}"
        for flag, reason in NO_EFFECT.items()
        if _given(getattr(args, flag.lstrip("-").replace("-", "_")))
    ]
    for count in args.grpc_infer_thread_count or ():
        # No effect here, but Triton refuses to start outside this range, and so does Nereid.
        if not count.strip().lstrip("-").isdigit() or not 2 <= int(count) <= 128:
            raise SystemExit(
                "nereid: invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."
            )
    if args.load_model and args.model_control_mode != "explicit":
        warnings.append("--load-model has no effect unless --model-control-mode=explicit")
    if "*" in args.load_model and len(args.load_model) > 1:
        raise SystemExit("nereid: --load-model=* loads every model and must be the only --load-model")
    backend_config: dict[str, dict[str, str]] = {}
    for item in args.backend_config:
        scope, _, pair = item.rpartition(",")
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"nereid: --backend-config expects [backend,]key=value, got '{item}'")
        backend_config.setdefault(scope, {})[key] = value
    try:
        default_max_batch_size = int(backend_config.get("", {}).get("default-max-batch-size", "4"))
    except ValueError:
        raise SystemExit("nereid: --backend-config=default-max-batch-size needs an integer") from None
    auto_complete = not args.disable_auto_complete_config and args.strict_model_config is not True
    metrics_config, metrics_warnings = _metrics_config(args.metrics_config)
    warnings += metrics_warnings
    settings = ServerSettings(
        # A repository given twice is one repository (as in Triton), not a source of duplicate models.
        model_repositories=tuple(dict.fromkeys(Path(p) for p in args.model_repository if not is_remote(p))),
        remote_repositories=tuple(dict.fromkeys(p for p in args.model_repository if is_remote(p))),
        server_id=args.id,
        allow_http=args.allow_http,
        http_address=args.http_address,
        http_port=args.http_port,
        reuse_http_port=args.reuse_http_port,
        http_max_input_size=args.http_max_input_size,
        http_header_timeout_s=args.http_header_timeout_secs,
        http_body_timeout_s=args.http_body_timeout_secs,
        http_body_min_rate=args.http_body_min_rate,
        http_max_connections=args.http_max_connections,
        max_model_instances=args.max_model_instances,
        allow_grpc=args.allow_grpc,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc=_grpc_options(args),
        allow_metrics=args.allow_metrics,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        metrics_interval_ms=args.metrics_interval_ms,
        allow_cpu_metrics=args.allow_cpu_metrics,
        allow_gpu_metrics=args.allow_gpu_metrics,
        metrics_config=metrics_config,
        model_control_mode=args.model_control_mode,
        load_models=tuple(args.load_model),
        repository_poll_secs=args.repository_poll_secs,
        allow_client_shm=args.allow_client_shm,
        allow_console=args.allow_console,
        allow_openai=args.allow_openai,
        openai_port=args.openai_port,
        http_header_forward_pattern=_forward_pattern(args.http_header_forward_pattern, "--http"),
        grpc_header_forward_pattern=_forward_pattern(args.grpc_header_forward_pattern, "--grpc"),
        http_restricted_api=_restricted_apis(args.http_restricted_api, "--http-restricted-api", "api"),
        grpc_restricted_protocol=_restricted_apis(
            args.grpc_restricted_protocol, "--grpc-restricted-protocol", "protocol"
        ),
        model_config_name=args.model_config_name,
        auto_complete_config=auto_complete,
        default_max_batch_size=default_max_batch_size,
        model_load_thread_count=args.model_load_thread_count,
        model_load_retry_count=max(0, args.model_load_retry_count),
        model_namespacing=args.model_namespacing,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        batch_scheduling=args.cpu_scheduling == "batch",
        log=_log_settings(args),
        log_escape=escape_messages(os.environ),
        backend_config=backend_config,
        rate_limit=args.rate_limit == "execution_count",
        rate_limit_resources=tuple(_resource_limit(item) for item in args.rate_limit_resource),
        response_cache=_cache_settings(args),
        backend_directory=Path(args.backend_directory) if args.backend_directory else None,
        trace=_trace_config(args, warnings),
    )
    if args.rate_limit_resource and args.rate_limit == "off":
        warnings.append("--rate-limit-resource has no effect unless --rate-limit=execution_count")
    return settings, warnings


def _log_settings(args: argparse.Namespace) -> LogSettings:
    if args.log_verbose < 0:
        raise SystemExit(f"nereid: --log-verbose expects a level of 0 or more, got {args.log_verbose}")
    return LogSettings(
        log_file=args.log_file,
        log_info=args.log_info,
        log_warning=args.log_warning,
        log_error=args.log_error,
        log_verbose_level=args.log_verbose,
        log_format=args.log_format,
    )


def _cache_settings(args: argparse.Namespace) -> CacheSettings | None:
    items = list(args.cache_config)
    if args.response_cache_byte_size is not None:  # Triton's older flag for the local cache
        if items:
            raise SystemExit(
                "nereid: Incompatible flags --response-cache-byte-size and --cache-config both provided. "
                "Please provide one or the other."
            )
        items.insert(0, f"local,size={args.response_cache_byte_size}")
    try:
        return CacheSettings.parse(items)
    except ValueError as exc:
        raise SystemExit(f"nereid: --cache-config {exc}") from None


def _trace_config(args: argparse.Namespace, warnings: list[str]) -> TraceConfig:
    try:
        config, trace_warnings = parse_trace_config(
            args.trace_config,
            file=args.trace_file,
            levels=args.trace_level,
            rate=args.trace_rate,
            count=args.trace_count,
            log_frequency=args.trace_log_frequency,
        )
        if config.mode == "opentelemetry":
            from nereid.tracing.opentelemetry import check_available

            check_available()
    except TraceConfigError as exc:
        raise SystemExit(f"nereid: {exc}") from None
    warnings += trace_warnings
    return config


def _resource_limit(item: str) -> ResourceLimit:
    try:
        return ResourceLimit.parse(item)
    except ValueError as exc:
        raise SystemExit(f"nereid: --rate-limit-resource {exc}") from None


def _forward_pattern(pattern: str, prefix: str) -> str:
    from nereid.frontends.header_forward import compile_pattern

    try:
        compile_pattern(pattern)
    except ValueError as exc:
        raise SystemExit(f"nereid: {prefix}-header-forward-pattern '{pattern}': {exc}") from None
    return pattern


def _grpc_options(args: argparse.Namespace) -> GrpcOptions:
    use_ssl = args.grpc_use_ssl or args.grpc_use_ssl_mutual
    if use_ssl and not (args.grpc_server_cert and args.grpc_server_key):
        raise SystemExit("nereid: --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    if args.grpc_use_ssl_mutual and not args.grpc_root_cert:
        raise SystemExit("nereid: --grpc-use-ssl-mutual needs --grpc-root-cert to check client certificates")

    def path(value: str) -> Path | None:
        return Path(value) if value else None

    return GrpcOptions(
        use_ssl=use_ssl,
        use_ssl_mutual=args.grpc_use_ssl_mutual,
        server_cert=path(args.grpc_server_cert),
        server_key=path(args.grpc_server_key),
        root_cert=path(args.grpc_root_cert),
        infer_response_compression_level=args.grpc_infer_response_compression_level,
        keepalive_time_ms=args.grpc_keepalive_time,
        keepalive_timeout_ms=args.grpc_keepalive_timeout,
        keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=args.grpc_http2_min_recv_ping_interval_without_data,
        http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
        max_connection_age_ms=args.grpc_max_connection_age,
        max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
        reuse_port=args.reuse_grpc_port,
        core=args.grpc_core,
        request_compression=args.grpc_request_compression,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["analyze"]:  # the one subcommand; every other command line is tritonserver's
        from nereid.analyze.cli import main as analyze

        return analyze(argv[1:])
    settings, warnings = parse_settings(argv)
    if settings.log.log_file:
        # Before the server's heavier imports: a log file that cannot be written fails at once, and tools
        # that wait for the file to appear (as Triton creates it at start) find it.
        try:
            open(settings.log.log_file, "a").close()  # noqa: SIM115
        except OSError as exc:
            print(
                f"nereid: cannot write the log file '{settings.log.log_file}': {exc.strerror}",
                file=sys.stderr,
            )
            return 1
    from nereid.server import serve

    return serve(settings, warnings)
