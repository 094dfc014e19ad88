"""The standard grpc.health.v1 Health service: SERVING while the server is ready, as Triton answers."""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from nereid.engine import Engine


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Check only; Watch stays UNIMPLEMENTED, as in Triton."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Any
    ) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse.SERVING
        if not self._engine.is_ready():
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)
