"""Build and start the gRPC server: its core, options, TLS, the inference and health services.

Two cores serve the same servicer. grpc.aio does everything Triton's endpoint does, but its per-call
machinery costs more CPU than the rest of a request. pygrpc-native (the `grpc` extra) runs HTTP/2 and the
per-call work in Rust, outside the GIL, and hands the servicer's coroutines to the same event loop (and
ModelInfer calls straight to the engine's callback path, see native.py); it serves unary calls itself and sends streams (ModelStreamInfer) to a grpc.aio server behind it. It has no
TLS, no response compression and no connection ageing, and it decompresses gzip requests but not deflate
ones: `--grpc-core=auto` (the default) picks it unless one of those is asked for, and says which core
serves and why. Deflate is asked for by default, as tritonserver takes it: pygrpc-native 0.5 refuses a
deflate request (UNIMPLEMENTED) before any handler sees it, so no handler could pass it on to the grpc.aio
server behind it as streams are; only `--grpc-request-compression=gzip` lets `auto` pick the native core.
"""

from __future__ import annotations

import importlib.util
import logging

import grpc
from tritonclient.grpc import service_pb2_grpc

from nereid.core.engine_client import EngineClient
from nereid.errors import Unavailable
from nereid.frontends.grpc.health import health_handler
from nereid.frontends.grpc.inflight import InferCalls
from nereid.frontends.grpc.restricted import RestrictedProtocolInterceptor
from nereid.frontends.grpc.servicer import InferenceServicer
from nereid.frontends.header_forward import header_forwarding
from nereid.settings import GrpcOptions, ServerSettings

log = logging.getLogger(__name__)

# Triton accepts messages up to INT32_MAX bytes each way (grpc's defaults are 4 MiB in, unlimited out).
MAX_MESSAGE_BYTES = 2**31 - 1
# grpc's compression levels; the algorithm for a level is picked among those the client accepts.
_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
# grpc's compression algorithms, as bits of grpc.compression_enabled_algorithms_bitset (grpc.Compression).
_ALGORITHM_BITS = {"identity": 1 << 0, "deflate": 1 << 1, "gzip": 1 << 2}


def server_options(options: GrpcOptions) -> list[tuple[str, int]]:
    """grpc channel arguments for tritonserver's --grpc-* flags."""
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
    if options.request_compression != {"gzip", "deflate"}:
        # grpc refuses requests in a disabled algorithm with UNIMPLEMENTED, as the native core refuses
        # deflate; the bits also bound the algorithms a response compression level may pick.
        enabled = sum(_ALGORITHM_BITS[name] for name in ("identity", *options.request_compression))
        result.append(("grpc.compression_enabled_algorithms_bitset", enabled))
    level = _COMPRESSION_LEVELS[options.infer_response_compression_level]
    if level:
        result.append(("grpc.default_compression_level", level))
    return result


def choose_core(options: GrpcOptions) -> tuple[str, str]:
    """("native" or "aio", why): the core that serves these options."""
    if options.core == "aio":
        return "aio", "grpc.aio (--grpc-core=aio)"
    needs = [
        what
        for what, asked in (
            ("TLS", options.use_ssl),
            ("response compression", options.infer_response_compression_level != "none"),
            ("--grpc-max-connection-age", options.max_connection_age_ms is not None),
            # It takes gzip whatever the flag says, so it serves exactly the requests of `gzip`.
            (
                "deflate requests (--grpc-request-compression=gzip refuses them)",
                options.request_compression != {"gzip"},
            ),
        )
        if asked
    ]
    if importlib.util.find_spec("pygrpc_native") is None:
        needs.append("the pygrpc-native package (pip install 'nereid[grpc]')")
    if not needs:
        return "native", "pygrpc-native: HTTP/2 and per-call work outside the GIL"
    if options.core == "native":
        raise Unavailable(f"--grpc-core=native cannot serve this endpoint: it needs {', '.join(needs)}")
    return "aio", f"grpc.aio, since the native core lacks {', '.join(needs)}"


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

        server = native_server(servicer, options=server_options(options), interceptors=interceptors)
    else:
        server = grpc.aio.server(options=server_options(options), interceptors=interceptors)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
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
