"""Build and start the gRPC server: its core, options, TLS, the inference and health services.

Two cores serve the same servicer. grpc.aio does everything Triton's endpoint does, but its per-call
machinery costs more CPU than the rest of a request. pygrpc-native (a dependency wherever it publishes
wheels) runs HTTP/2 and the per-call work in Rust, outside the GIL, and hands the servicer's coroutines to
the same event loop (and ModelInfer calls straight to the engine's callback path, see native.py); it serves
unary calls itself and sends streams (ModelStreamInfer) to a grpc.aio server behind it. It has no TLS, no
response compression and no connection ageing, and it decompresses gzip requests but not deflate ones:
pygrpc-native 0.5 refuses a deflate request (UNIMPLEMENTED) before any handler sees it. `--grpc-core=auto`
(the default) picks it unless TLS, response compression, connection ageing or deflate requests
(`--grpc-request-compression` naming deflate) are asked for, and the log says which core serves and why.
"""

from __future__ import annotations

import importlib.util
import logging

import grpc

from nereid.core.engine_client import EngineClient
from nereid.errors import Unavailable
from nereid.frontends.grpc.health import health_handler
from nereid.frontends.grpc.inflight import InferCalls
from nereid.frontends.grpc.restricted import RestrictedProtocolInterceptor
from nereid.frontends.grpc.servicer import InferenceServicer
from nereid.frontends.grpc.undecodable import add_inference_service
from nereid.frontends.header_forward import header_forwarding
from nereid.settings import GrpcOptions, ServerSettings

log = logging.getLogger(__name__)

# Triton accepts messages up to INT32_MAX bytes each way (grpc's defaults are 4 MiB in, unlimited out).
MAX_MESSAGE_BYTES = 2**31 - 1
# grpc's compression levels; the algorithm for a level is picked among those the client accepts.
_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
# grpc's compression algorithms, as bits of grpc.compression_enabled_algorithms_bitset (grpc.Compression).
_ALGORITHM_BITS = {"identity": 1 << 0, "deflate": 1 << 1, "gzip": 1 << 2}


def server_options(options: GrpcOptions, core: str = "aio") -> list[tuple[str, int]]:
    """grpc channel arguments for tritonserver's --grpc-* flags, on the given core."""
    result = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # grpc sets SO_REUSEPORT by default, which would let two servers share a port without a word;
        # Triton refuses a port in use unless --reuse-grpc-port=true.
        ("grpc.so_reuseport", int(options.reuse_port)),
        ("grpc.keepalive_time_ms", options.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", options.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(options.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            options.http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", options.http2_max_ping_strikes),
    ]
    if options.max_connection_age_ms is not None:
        result.append(("grpc.max_connection_age_ms", options.max_connection_age_ms))
    if options.max_connection_age_grace_ms is not None:
        result.append(("grpc.max_connection_age_grace_ms", options.max_connection_age_grace_ms))
    compressions = effective_request_compression(options, core)
    if compressions != {"gzip", "deflate"}:
        # grpc refuses requests in a disabled algorithm with UNIMPLEMENTED, as the native core refuses
        # deflate; the bits also bound the algorithms a response compression level may pick.
        enabled = sum(_ALGORITHM_BITS[name] for name in ("identity", *compressions))
        result.append(("grpc.compression_enabled_algorithms_bitset", enabled))
    level = _COMPRESSION_LEVELS[options.infer_response_compression_level]
    if level:
        result.append(("grpc.default_compression_level", level))
    return result


# What the native core cannot do, as the log and --grpc-core=native's refusal name it.
_NATIVE_LACKS = (
    ("TLS", lambda o: o.use_ssl),
    ("response compression", lambda o: o.infer_response_compression_level != "none"),
    ("connection ageing (--grpc-max-connection-age)", lambda o: o.max_connection_age_ms is not None),
    (
        "deflate-compressed requests (--grpc-request-compression names deflate)",
        lambda o: o.request_compression is not None and "deflate" in o.request_compression,
    ),
)
NATIVE_WHY = (
    "pygrpc-native, the native core (HTTP/2 and per-call work outside the GIL); it refuses "
    "deflate-compressed requests with UNIMPLEMENTED, and --grpc-core=aio serves them"
)


def choose_core(options: GrpcOptions) -> tuple[str, str]:
    """("native" or "aio", why): the core that serves these options, and a sentence for the log."""
    if options.core == "aio":
        return "aio", "grpc.aio, as --grpc-core=aio asks"
    needs = [what for what, asked in _NATIVE_LACKS if asked(options)]
    if not needs and importlib.util.find_spec("pygrpc_native") is None:
        if options.core == "native":
            raise Unavailable(
                "--grpc-core=native needs the pygrpc-native package, which publishes wheels for Linux "
                "x86_64 and macOS arm64 only; --grpc-core=aio serves everywhere"
            )
        return "aio", "grpc.aio, since the pygrpc-native package is not installed on this platform"
    if not needs:
        return "native", NATIVE_WHY
    if options.core == "native":
        raise Unavailable(f"--grpc-core=native cannot serve this endpoint: it lacks {_and(needs)}")
    return "aio", f"grpc.aio, since the native core lacks {_and(needs)}"


def effective_request_compression(options: GrpcOptions, core: str) -> frozenset[str]:
    """The compressions requests may use: as asked, else what the core decompresses (Triton: both)."""
    if options.request_compression is not None:
        return options.request_compression
    return frozenset({"gzip"}) if core == "native" else frozenset({"gzip", "deflate"})


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _credentials(options: GrpcOptions) -> grpc.ServerCredentials:
    if options.server_key is None or options.server_cert is None:
        raise Unavailable("gRPC over TLS needs --grpc-server-cert and --grpc-server-key")
    try:
        key = options.server_key.read_bytes()
        cert = options.server_cert.read_bytes()
        root = options.root_cert.read_bytes() if options.root_cert is not None else None
    except OSError as exc:
        raise Unavailable(f"gRPC TLS: cannot read {exc.filename}: {exc.strerror}") from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=options.use_ssl_mutual
    )


async def start_grpc_server(
    engine: EngineClient, settings: ServerSettings, calls: InferCalls | None = None
) -> tuple[grpc.aio.Server, int]:
    """A started server on the running event loop, and the port it listens on. `calls`, when given, counts
    the inference calls in flight."""
    options = settings.grpc
    core, why = choose_core(options)
    log.info("gRPC served by %s", why)
    interceptors = (
        [RestrictedProtocolInterceptor(settings.grpc_restricted_protocol)]
        if settings.grpc_restricted_protocol
        else []
    )
    servicer = InferenceServicer(engine, header_forwarding(settings.grpc_header_forward_pattern), calls)
    if core == "native":
        from nereid.frontends.grpc.native import native_server

        server = native_server(servicer, options=server_options(options, core), interceptors=interceptors)
    else:
        server = grpc.aio.server(options=server_options(options, core), interceptors=interceptors)
    add_inference_service(servicer, server)
    server.add_generic_rpc_handlers((health_handler(engine),))
    address = f"{settings.grpc_address}:{settings.grpc_port}"
    try:
        if options.use_ssl:
            port = server.add_secure_port(address, _credentials(options))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:  # the cores say only that binding failed: mostly a port in use
        raise Unavailable(
            f"failed to start GRPC service: Unavailable - Socket '{address}' already in use ({exc})"
        ) from None
    await server.start()
    return server, port
