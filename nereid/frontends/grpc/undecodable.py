"""Inference messages that do not parse, answered as Triton answers them.

grpc parses a call's message before any handler runs, and when the parser raises it logs a traceback and
answers UNKNOWN with the exception's type: for what is a client's mistake. Triton answers INTERNAL "Unable
to parse request" and logs nothing. So the inference methods are registered with a parser that hands the
servicer `UNDECODABLE` instead of raising, and the servicer answers it like any other bad request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2_grpc

from nereid.errors import InternalError

SERVICE = "inference.GRPCInferenceService"
_INFERENCE_METHODS = ("ModelInfer", "ModelStreamInfer")


class _Undecodable:
    """A message that did not parse (one object stands for all)."""

    __slots__ = ()


UNDECODABLE: Any = _Undecodable()


def unparsable() -> InternalError:
    """Triton's answer to a message that does not parse."""
    return InternalError("Unable to parse request")


def _tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError:
            return UNDECODABLE

    return deserialize


class _Recorder:
    """Takes the handlers the generated code registers, so that they can be changed before the server
    gets them."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers as the registered ones below

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = dict(handlers)


def add_inference_service(servicer: Any, server: Any) -> None:
    """`service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server`, but that the inference methods'
    messages that do not parse reach the servicer as UNDECODABLE."""
    recorder = _Recorder()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, recorder)
    handlers = recorder.handlers
    for name in _INFERENCE_METHODS:
        handler = handlers[name]
        handlers[name] = handler._replace(request_deserializer=_tolerant(handler.request_deserializer))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
