"""--grpc-restricted-protocol: RPC groups that answer only calls carrying a given header."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from nereid.settings import RestrictedApi

# Triton's gRPC restriction header is the configured key with this prefix.
HEADER_PREFIX = "triton-grpc-protocol-"

_GROUP_OF_RPC = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


class RestrictedProtocolInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls to restricted groups without their header, with Triton's UNAVAILABLE and text."""

    def __init__(self, rules: tuple[RestrictedApi, ...]) -> None:
        self._rules = {group: rule for rule in rules for group in rule.groups}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        group = _GROUP_OF_RPC.get(details.method.rsplit("/", 1)[-1])
        rule = self._rules.get(group) if group else None
        if rule is None:
            return await continuation(details)
        header = HEADER_PREFIX + rule.header
        if dict(details.invocation_metadata or ()).get(header) == rule.value:
            return await continuation(details)
        handler = await continuation(details)
        message = f"This protocol is restricted, expecting header '{header}'"

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

        if handler.request_streaming:  # ModelStreamInfer
            return grpc.stream_stream_rpc_method_handler(
                refuse, handler.request_deserializer, handler.response_serializer
            )
        return grpc.unary_unary_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer
        )
