"""Build and start the grpc.aio server: options, TLS, the inference and health services."""

from __future__ import annotations

import grpc
from tritonclient.grpc import service_pb2_grpc

from nereid.engine import Engine
from nereid.errors import Unavailable
from nereid.frontends.grpc.health import health_handler
from nereid.frontends.grpc.restricted import RestrictedProtocolInterceptor
from nereid.frontends.grpc.servicer import InferenceServicer
from nereid.frontends.header_forward import header_forwarding
from nereid.settings import GrpcOptions, ServerSettings

# Triton accepts messages up to INT32_MAX bytes each way (grpc's defaults are 4 MiB in, unlimited out).
MAX_MESSAGE_BYTES = 2**31 - 1
# grpc's compression levels; the algorithm for a level is picked among those the client accepts.
_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}


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
    level = _COMPRESSION_LEVELS[options.infer_response_compression_level]
    if level:
        result.append(("grpc.default_compression_level", level))
    return result


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


async def start_grpc_server(engine: Engine, settings: ServerSettings) -> tuple[grpc.aio.Server, int]:
    """A started server on the running event loop, and the port it listens on."""
    options = settings.grpc
    interceptors = (
        [RestrictedProtocolInterceptor(settings.grpc_restricted_protocol)]
        if settings.grpc_restricted_protocol
        else []
    )
    server = grpc.aio.server(options=server_options(options), interceptors=interceptors)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceServicer(engine, header_forwarding(settings.grpc_header_forward_pattern)), server
    )
    server.add_generic_rpc_handlers((health_handler(engine),))
    address = f"{settings.grpc_address}:{settings.grpc_port}"
    try:
        if options.use_ssl:
            port = server.add_secure_port(address, _credentials(options))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise Unavailable(f"gRPC: cannot listen on {address}: {exc}") from None
    await server.start()
    return server, port
