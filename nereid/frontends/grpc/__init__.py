"""Triton's gRPC protocol (inference.GRPCInferenceService) and grpc.health.v1, on grpc.aio."""

from nereid.frontends.grpc.server import start_grpc_server

__all__ = ["start_grpc_server"]
