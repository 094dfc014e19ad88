"""What `nereid --help` says of each flag, which of Triton's flags have no effect here and why, and the
error for a misspelled flag."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import NoReturn

# Triton flags that Nereid accepts so that tritonserver command lines keep working, but that have no
# effect here, each with the reason. Each one given is reported at start-up.
NO_EFFECT = {
    "--grpc-infer-thread-count": "sizes a thread pool of Triton's that Nereid does not have",
    "--grpc-infer-allocation-pool-size": "sizes a memory pool of Triton's that Nereid does not have",
    "--grpc-max-response-pool-size": "sizes a memory pool of Triton's that Nereid does not have",
    "--model-load-gpu-limit": "Nereid does not track GPU memory per device",
    "--cuda-virtual-address-size": "Nereid does not manage CUDA memory",
    "--enable-peer-access": "Nereid does not manage CUDA peer access",
    "--allow-sagemaker": "Nereid has no SageMaker endpoint",
    "--sagemaker-port": "Nereid has no SageMaker endpoint",
    "--sagemaker-safe-port-range": "Nereid has no SageMaker endpoint",
    "--sagemaker-thread-count": "Nereid has no SageMaker endpoint",
    "--allow-vertex-ai": "Nereid has no Vertex AI endpoint",
    "--vertex-ai-port": "Nereid has no Vertex AI endpoint",
    "--vertex-ai-thread-count": "Nereid has no Vertex AI endpoint",
    "--vertex-ai-default-model": "Nereid has no Vertex AI endpoint",
}

# Flags not described where they are declared in cli.py.
HELP = {
    "--allow-http": "serve Triton's HTTP/REST API",
    "--http-address": "address the HTTP server binds to",
    "--http-port": "HTTP port",
    "--reuse-http-port": "let other processes listen on the same HTTP port (the kernel spreads connections)",
    "--http-max-input-size": "largest HTTP request body accepted, in bytes (see docs/http_limits.md)",
    "--http-header-timeout-secs": "a request's header section must arrive within this long of its first "
    "byte, or it is answered 408 (see docs/http_limits.md)",
    "--http-body-timeout-secs": "the window over which a request body's rate is measured (see "
    "--http-body-min-rate)",
    "--http-body-min-rate": "bytes per second a request body must average over each --http-body-timeout-secs, "
    "or it is answered 408; 0: a body that stops for a whole window is answered 408",
    "--http-max-connections": "HTTP connections open at once; beyond it new ones wait to be accepted "
    "(default: half the open-file limit, at most 10000)",
    "--max-model-instances": "model instances the server holds, all models together; a load beyond it "
    "fails before any instance starts (default: 256 per CPU, at most one per 48 MiB of host memory, "
    "at least 16)",
    "--allow-grpc": "serve Triton's gRPC API",
    "--grpc-address": "address the gRPC server binds to",
    "--grpc-port": "gRPC port",
    "--reuse-grpc-port": "let other processes listen on the same gRPC port",
    "--grpc-use-ssl": "serve gRPC over TLS (needs --grpc-server-cert and --grpc-server-key)",
    "--grpc-use-ssl-mutual": "serve gRPC over TLS and check client certificates against --grpc-root-cert",
    "--grpc-server-cert": "the server's certificate (PEM)",
    "--grpc-server-key": "the server's private key (PEM)",
    "--grpc-root-cert": "the certificate authority that signs client certificates (PEM)",
    "--grpc-infer-response-compression-level": "compression of gRPC infer responses",
    "--grpc-keepalive-time": "interval between keepalive pings on a gRPC connection",
    "--grpc-keepalive-timeout": "how long to wait for a keepalive ping's answer",
    "--grpc-keepalive-permit-without-calls": "send keepalive pings on connections with no call in flight",
    "--grpc-http2-max-pings-without-data": "pings sent without data before more are refused (0: no limit)",
    "--grpc-http2-min-recv-ping-interval-without-data": "shortest interval between client pings accepted",
    "--grpc-http2-max-ping-strikes": "bad pings tolerated before the connection is closed (0: no limit)",
    "--grpc-max-connection-age": "close gRPC connections after this long (none: no limit)",
    "--grpc-max-connection-age-grace": "time calls get to finish once a connection reached its maximum age",
    "--allow-metrics": "serve Prometheus metrics",
    "--metrics-address": "address the metrics server binds to",
    "--metrics-port": "metrics port",
    "--model-control-mode": "none: load every model at start; poll: follow the repository; explicit: load API",
    "--metrics-interval-ms": "interval between samples of the gauges (CPU, GPU, memory)",
    "--allow-cpu-metrics": "report CPU and memory use",
    "--allow-client-shm": "let clients register system shared memory regions",
    "--repository-poll-secs": "interval between repository scans with --model-control-mode=poll",
    "--model-config-name": "configuration file to use instead of config.pbtxt, where a model has it",
    "--disable-auto-complete-config": "serve configurations as written, without completing them from the model",
    "--backend-config": "a backend setting, e.g. python,execute-timeout-seconds=30 (repeatable)",
    "--model-load-thread-count": "models loaded at once",
    "--strict-readiness": "/v2/health/ready needs every model ready (false: only the server)",
    "--exit-on-error": "exit at start-up when a model fails to load",
    "--exit-timeout-secs": "on SIGINT/SIGTERM, how long requests in flight get before the server exits "
    "(they are then answered 503); a second signal exits at once",
    "--log-verbose": "verbose logs: 1 or more logs each request (model, version, id, status, time), each "
    "HTTP request and why each dynamic batch was cut",
    "--log-info": "log INFO messages",
    "--log-warning": "log WARNING messages",
    "--log-error": "log ERROR messages",
    "--log-format": "default: I1123 23:55:35.123456 <pid> <file>:<line>] ...; ISO8601: 2026-11-23T23:55:35Z I ...",
    "--log-file": "write the log to this file (appended to) instead of standard error",
    "--rate-limit": "execution_count: run instances only while their rate-limiter resources are free",
    "--rate-limit-resource": "a resource's count, per device or global (repeatable)",
    "--http-header-forward-pattern": "request headers whose names match this regular expression become "
    "request parameters (case-insensitive unless it starts with (?-i))",
    "--grpc-header-forward-pattern": "gRPC metadata whose keys match this regular expression become request "
    "parameters",
    "--grpc-core": "native: pygrpc-native (HTTP/2 and per-call work outside the GIL; installed with Nereid on "
    "Linux x86_64 and macOS arm64), which refuses deflate-compressed requests with UNIMPLEMENTED; aio: "
    "grpc.aio, which serves every option and compression; auto: native unless TLS, response compression, "
    "connection ageing or deflate requests are asked for, or the package is missing",
    "--grpc-request-compression": "compressions gRPC requests may use, gzip and/or deflate; others are refused "
    "with UNIMPLEMENTED. Default: what the core decompresses (native: gzip; aio: both, as tritonserver); "
    "naming deflate makes --grpc-core=auto serve with grpc.aio",
    "--cpu-scheduling": "Linux scheduling policy of the server's threads and worker processes: batch "
    "(SCHED_BATCH: a thread woken by another waits for a CPU rather than taking the waker's at once, for "
    "fewer context switches per request) or normal (the policy the server was started with)",
    "--cache-config": "the response cache: local,size=BYTES or redis,host=...,port=...,password=... "
    "(repeatable, one setting each)",
    "--response-cache-byte-size": "Triton's older flag: a local response cache of this many bytes",
}


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line that points at --help rather than the whole usage."""

    def error(self, message: str) -> NoReturn:
        if "--model-repository" in message and "required" in message:
            message = (
                "--model-repository is required: the folder of models to serve, for example "
                "nereid --model-repository=examples/model_repository"
            )
        self.exit(2, f"{self.prog}: {message} (nereid --help lists every flag)\n")


class Formatter(argparse.HelpFormatter):
    """Each flag's help followed by its default, where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, [], False, "", argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def describe(parser: argparse.ArgumentParser, not_yet_supported: Iterable[str]) -> None:
    """Fill in the help of every flag that has none."""
    later = set(not_yet_supported)
    for action in parser._actions:
        flag = next((s for s in action.option_strings if s.startswith("--")), None)
        if flag is None or action.help not in (None, argparse.SUPPRESS):
            continue
        if flag in NO_EFFECT:
            action.help = f"accepted, no effect: {NO_EFFECT[flag]}"
        elif flag in later:
            action.help = "accepted, no effect yet (a later version implements it)"
        else:
            action.help = HELP.get(flag)


def unknown_flag(argv: Sequence[str], parser: argparse.ArgumentParser) -> str | None:
    """The error for the first flag the parser does not know, with the closest known one, or None."""
    known = [s for s in parser._option_string_actions if s.startswith("--")]
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        flag = token.partition("=")[0]
        if flag in parser._option_string_actions:
            continue
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"nereid: unknown flag {flag}{hint} (nereid --help lists every flag)"
    return None
