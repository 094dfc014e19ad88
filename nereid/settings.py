"""Server settings: built once from the command line, then passed to whatever needs them."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nereid.latency_summary import DEFAULT_QUANTILES
from nereid.log_settings import LogSettings
from nereid.tracing.config import TraceConfig

# API groups that --http-restricted-api / --grpc-restricted-protocol can put behind a header.
API_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
    "openai",  # the OpenAI routes under /v1 (HTTP only)
)


@dataclass(frozen=True)
class RestrictedApi:
    """Calls to any of `groups` must carry the header `header` with the value `value`."""

    groups: frozenset[str]
    header: str  # lower-case
    value: str


@dataclass(frozen=True)
class GrpcOptions:
    """TLS, keepalive, compression and socket options of the gRPC endpoint (tritonserver's defaults)."""

    use_ssl: bool = False
    use_ssl_mutual: bool = False  # also require and check a client certificate
    server_cert: Path | None = None
    server_key: Path | None = None
    root_cert: Path | None = None
    infer_response_compression_level: str = "none"  # none, low, medium or high
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None
    max_connection_age_grace_ms: int | None = None
    reuse_port: bool = False
    # Which server serves gRPC: "native" (pygrpc-native: HTTP/2 and per-call work in Rust, outside the
    # GIL), "aio" (grpc.aio), or "auto": native where it can serve every option given, else aio.
    core: str = "auto"
    # The compressions a request may come in; None: what the core decompresses (grpc.aio: gzip and deflate,
    # as tritonserver; pygrpc-native: gzip). Naming deflate makes `auto` serve with grpc.aio.
    request_compression: frozenset[str] | None = None


@dataclass(frozen=True)
class MetricsConfig:
    """`--metrics-config key=value` settings, with Triton's defaults."""

    counter_latencies: bool = True  # the nv_inference_*_duration_us counters
    summary_latencies: bool = False  # the nv_inference_*_summary_us summaries
    summary_quantiles: tuple[float, ...] = tuple(q for q, _ in DEFAULT_QUANTILES)
    histogram_latencies: bool = False  # nv_inference_first_response_histogram_ms


@dataclass(frozen=True)
class ResourceLimit:
    """One `--rate-limit-resource`: `device` None applies to every device (or to the global resource)."""

    name: str
    count: int
    device: int | None = None

    @classmethod
    def parse(cls, text: str) -> ResourceLimit:
        parts = text.split(":")
        try:
            if len(parts) in (2, 3) and parts[0]:
                device = int(parts[2]) if len(parts) == 3 else None
                return cls(parts[0], int(parts[1]), device)
        except ValueError:
            pass
        raise ValueError(f"expected <name>:<count>[:<device>], got '{text}'")


@dataclass(frozen=True)
class CacheSettings:
    """`--cache-config <kind>,<key>=<value>`: the response cache (`local` or `redis`) and its settings."""

    kind: str
    size: int = 0  # local: bytes at most
    host: str = "localhost"  # redis
    port: int = 6379
    user: str = ""
    password: str = ""
    db: int = 0
    timeout_ms: int = 500  # connect and reply timeouts
    ttl_s: int = 0  # 0: entries do not expire (Redis's own eviction policy applies)

    @classmethod
    def parse(cls, items: Sequence[str]) -> CacheSettings | None:
        """From the --cache-config values, in order; None when there are none."""
        kind = ""
        values: dict[str, str] = {}
        for item in items:
            name, _, pair = item.partition(",")
            key, sep, value = pair.partition("=")
            if not sep or not key or not name:
                raise ValueError(f"expected <cache>,<key>=<value>, got '{item}'")
            if kind and name != kind:
                raise ValueError(
                    f"found multiple cache configurations, but only a single cache is currently supported "
                    f"(got '{kind}' and '{name}')"
                )
            kind = name
            values[key] = value
        if not kind:
            return None
        if kind not in ("local", "redis"):
            raise ValueError(f"unknown response cache '{kind}': expected 'local' or 'redis'")
        if kind == "redis":
            if "host" not in values or "port" not in values:
                raise ValueError(
                    "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' "
                    "and 'port' in the configuration - e.g. --cache-config redis,host=redis --cache-config "
                    "redis,port=6379"
                )
            # Triton reads the port as C's atoi does: a port that is not a number is 0, which then fails to
            # connect at start with Triton's text rather than at parsing.
            digits = re.match(r"\s*[+-]?\d+", values["port"])
            values["port"] = digits.group(0).strip() if digits else "0"
            # Credentials may come from the environment instead of the command line (Triton's variables).
            for key, variable in (
                ("user", "TRITONCACHE_REDIS_USERNAME"),
                ("password", "TRITONCACHE_REDIS_PASSWORD"),
            ):
                if key not in values and os.environ.get(variable):
                    values[key] = os.environ[variable]
        fields = {"size": int, "host": str, "port": int, "user": str, "password": str, "db": int,
                  "timeout_ms": int, "ttl_s": int}  # fmt: skip
        settings: dict[str, object] = {}
        for key, value in values.items():
            convert = fields.get(key)
            if convert is None:
                raise ValueError(f"unknown {kind} cache setting '{key}'")
            try:
                settings[key] = convert(value)
            except ValueError:
                raise ValueError(f"{kind} cache setting '{key}' expects an integer, got '{value}'") from None
        return cls(kind, **settings)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ServerSettings:
    model_repositories: tuple[Path, ...]
    server_id: str = "triton"
    # HTTP/REST
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    reuse_http_port: bool = False  # let other servers bind the same HTTP port (SO_REUSEPORT)
    http_max_input_size: int = 64 * 1024 * 1024
    # How long a request may take to arrive, and connections open at once (docs/http_limits.md)
    http_header_timeout_s: float = 30.0
    http_body_timeout_s: float = 30.0
    http_body_min_rate: int = 1024  # bytes per second, over each http_body_timeout_s
    http_max_connections: int | None = None  # None: from the process's file limit (listener.py)
    # Model instances the server holds at most, all models together; None: from the host's CPUs and memory
    max_model_instances: int | None = None
    http_restricted_api: tuple[RestrictedApi, ...] = ()
    grpc_restricted_protocol: tuple[RestrictedApi, ...] = ()
    allow_client_shm: bool = False  # clients may register system / CUDA shared memory regions
    # request headers whose names match become request parameters ("": none)
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    allow_console: bool = True  # the web console at /console on the HTTP port
    allow_openai: bool = True  # the OpenAI API under /v1
    openai_port: int | None = None  # a port of its own for /v1 (on http_address); None: the HTTP port
    # gRPC
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc: GrpcOptions = field(default_factory=GrpcOptions)
    # ports that later frontends serve
    allow_metrics: bool = True
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8002
    metrics_interval_ms: int = 2000
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    metrics_config: MetricsConfig = field(default_factory=MetricsConfig)
    # repository and models
    remote_repositories: tuple[str, ...] = ()  # s3://, gs:// and as:// repositories, mirrored locally
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    repository_poll_secs: int = 15
    model_config_name: str = ""
    auto_complete_config: bool = True
    default_max_batch_size: int = 4
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0  # how many times a model that failed to load is tried again
    # --model-namespacing: a model is known by its repository and name, so a name may repeat across them
    model_namespacing: bool = False
    # lifecycle
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    batch_scheduling: bool = True  # the server's threads and workers under SCHED_BATCH (host.py)
    log: LogSettings = field(default_factory=LogSettings)  # --log-* flags; changed at run time by /v2/logging
    log_escape: bool = True  # TRITON_SERVER_ESCAPE_LOG_MESSAGES: messages written as JSON strings
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    # --rate-limit=execution_count: executions wait for the resources their instance group names
    rate_limit: bool = False
    rate_limit_resources: tuple[ResourceLimit, ...] = ()
    # --cache-config: the response cache that models with `response_cache { enable: true }` use
    response_cache: CacheSettings | None = None
    backend_directory: Path | None = None  # Python-based backends: <dir>/<backend>/model.py
    trace: TraceConfig = field(default_factory=TraceConfig)  # --trace-config and the older --trace-* flags
