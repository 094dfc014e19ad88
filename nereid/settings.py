"""Server settings: built once from the command line, then passed to whatever needs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ServerSettings:
    model_repositories: tuple[Path, ...]
    server_id: str = "triton"
    # HTTP/REST
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = 64 * 1024 * 1024
    # ports that later frontends serve
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    allow_metrics: bool = True
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8002
    # repository and models
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    model_config_name: str = ""
    auto_complete_config: bool = True
    default_max_batch_size: int = 4
    model_load_thread_count: int = 4
    # lifecycle
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    log_verbose: int = 0
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
