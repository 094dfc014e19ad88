"""Nereid's error statuses as gRPC status codes, as Triton maps them."""

from __future__ import annotations

import grpc

from nereid.errors import Status

GRPC_STATUS = {
    Status.UNKNOWN: grpc.StatusCode.UNKNOWN,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
    Status.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Status.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    Status.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Status.CANCELLED: grpc.StatusCode.CANCELLED,
    # Triton answers a restricted protocol called without its header with UNAVAILABLE
    Status.PERMISSION_DENIED: grpc.StatusCode.UNAVAILABLE,
}
