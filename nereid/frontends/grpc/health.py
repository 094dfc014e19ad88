"""The standard grpc.health.v1 Health service: SERVING while the server is ready, as Triton answers.

Its two messages are built here from a descriptor rather than taken from grpcio-health-checking, whose
releases pin protobuf versions that tritonclient's generated modules do not accept.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from nereid.core.engine_client import EngineClient

SERVICE = "grpc.health.v1.Health"
SERVING = 1
NOT_SERVING = 2


def _messages() -> tuple[Any, Any]:
    """HealthCheckRequest and HealthCheckResponse, as in grpc's health/v1/health.proto."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="grpc/health/v1/health.proto", package="grpc.health.v1")
    proto.syntax = "proto3"
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response = proto.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=field.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=field.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with another copy of health.proto
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


HealthCheckRequest, HealthCheckResponse = _messages()


def health_handler(engine: EngineClient) -> grpc.GenericRpcHandler:
    """Check only; Watch is answered UNIMPLEMENTED, as Triton does."""

    async def check(request: Any, context: Any) -> Any:
        return HealthCheckResponse(status=SERVING if engine.is_ready() else NOT_SERVING)

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                check,
                request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString,
            )
        },
    )
