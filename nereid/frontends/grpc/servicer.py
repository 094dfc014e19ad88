"""inference.GRPCInferenceService on the protocol-neutral engine: each RPC translates, the engine decides."""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.core.engine_client import EngineClient, QueuedInfer
from nereid.errors import DecoupledModel, InvalidArgument, NereidError, Unsupported, unexpected
from nereid.frontends.grpc.codec import decode_infer_request, encode_infer_response, load_parameters
from nereid.frontends.grpc.inflight import InferCalls
from nereid.frontends.grpc.layouts import LayoutCache, ResponseLayouts
from nereid.frontends.grpc.status import GRPC_STATUS
from nereid.frontends.grpc.stream import request_stream, stream_responses
from nereid.frontends.grpc.undecodable import UNDECODABLE, unparsable
from nereid.frontends.header_forward import HeaderForwarding
from nereid.tracing.trace import (
    GRPC_SEND_END,
    GRPC_SEND_START,
    GRPC_WAITREAD_END,
    GRPC_WAITREAD_START,
)
from nereid.tracing.updates import grpc_update
from nereid.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

Request = TypeVar("Request")
Response = TypeVar("Response")
T = TypeVar("T")
Context = Any  # grpc.aio.ServicerContext; grpcio ships no type information

# Metadata with which a stream asks for a real gRPC status on the first error instead of `error_message`.
STRICT_STREAM_KEY = "triton_grpc_error"


# Triton's testing hook: every RPC but inference holds its answer (or error) back this many seconds,
# after doing its work, so that clients can test their deadlines on them.
RESPONSE_DELAY_ENV = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC"


def response_delay_s() -> int:
    """The hook's seconds; unset, not a number or negative: 0 (no delay)."""
    try:
        return max(0, int(os.environ.get(RESPONSE_DELAY_ENV, "0")))
    except ValueError:
        return 0


def _rpc(
    method: Callable[[Any, Request, Context], Awaitable[Response]],
) -> Callable[[Any, Request, Context], Awaitable[Response]]:
    """A non-inference RPC. Answer a NereidError with its gRPC status and message; anything else as INTERNAL,
    logged once."""

    @functools.wraps(method)
    async def handler(self: Any, request: Request, context: Context) -> Response:
        error: tuple[grpc.StatusCode, str] | None = None
        try:
            response = await method(self, request, context)
        except NereidError as exc:
            error = (GRPC_STATUS[exc.status], exc.message)
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            error = (grpc.StatusCode.INTERNAL, unexpected(exc).message)
        if self._response_delay_s:  # before abort, which sends the status at once
            await asyncio.sleep(self._response_delay_s)
        if error is None:
            return response
        del request  # see ModelInfer
        await context.abort(*error)
        raise AssertionError("unreachable: context.abort raises")

    return handler


def _setting_value(value: Any) -> Any:
    """A LogSettings value as its type was set (None when none was)."""
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


def _infer_error(exc: BaseException, model_name: str) -> NereidError:
    """What ModelInfer answers for an exception: Triton's text for a decoupled model, a NereidError as it
    is, anything else as INTERNAL (logged once, with its traceback)."""
    if isinstance(exc, DecoupledModel):
        return DecoupledModel("ModelInfer RPC")
    if isinstance(exc, NereidError):
        return exc
    log.error("unexpected error serving ModelInfer for model '%s'", model_name, exc_info=exc)
    return unexpected(exc)


def drop(request: InferRequest) -> None:
    """A request whose client went away: its trace ends unanswered."""
    trace = request.trace
    if trace is not None:
        trace.now(GRPC_SEND_END)
        trace.close()


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled meanwhile: the request is being withdrawn
        future.set_result(result)


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        engine: EngineClient,
        forwarding: HeaderForwarding | None = None,
        calls: InferCalls | None = None,
    ) -> None:
        self._engine = engine
        self.calls = calls if calls is not None else InferCalls()  # what a stopping server waits for
        self._forwarding = forwarding  # --grpc-header-forward-pattern
        self._tracer = engine.tracer
        self._response_delay_s = response_delay_s()
        self._layouts = LayoutCache()
        self._responses = ResponseLayouts()

    # health and metadata
    @_rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._engine.is_live())

    @_rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._engine.is_ready())

    @_rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self._engine.model_ready(request.name, request.version))

    @_rpc
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        metadata = self._engine.server_metadata()
        return pb.ServerMetadataResponse(
            name=metadata.name, version=metadata.version, extensions=metadata.extensions
        )

    @_rpc
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        metadata = self._engine.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=metadata.name,
            versions=metadata.versions,
            platform=metadata.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in metadata.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in metadata.outputs],
        )

    @_rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self._engine.model_config_message(request.name, request.version))

    @_rpc
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        index = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[
                index(name=e.name, version=e.version or "", state=e.state or "", reason=e.reason or "")
                for e in self._engine.repository_index(request.ready)
            ]
        )

    @_rpc
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        # The statistics JSON uses the message's own field names, so protobuf reads it as it is.
        statistics = self._engine.statistics(request.name, request.version)
        return json_format.ParseDict(statistics, pb.ModelStatisticsResponse())

    # inference: ModelInfer in steps, which the native core also calls one by one (see native.py)
    def decode(
        self,
        message: pb.ModelInferRequest,
        metadata: Sequence[tuple[str, Any]] = (),
        payload: bytes | None = None,
    ) -> InferRequest:
        """The engine's request, with its forwarded headers and, when sampled, its trace; raises the
        NereidError to answer instead. `payload`, the message's bytes where the core has them, lets a
        request laid out as an earlier one be decoded from that one's layout."""
        received = time.perf_counter_ns() if self._tracer.active else 0
        try:
            if payload is None:
                request = decode_infer_request(message)
            else:
                request = self._layouts.decode(message, payload)
            self._received(request, metadata, received)
        except Exception as exc:
            raise _infer_error(exc, message.model_name) from None
        return request

    def decode_known(self, payload: bytes, metadata: Sequence[tuple[str, Any]] = ()) -> InferRequest | None:
        """`decode` of a message laid out as one before, from its bytes alone (see layouts.py); None where
        it is not, and `decode` takes the parsed message."""
        received = time.perf_counter_ns() if self._tracer.active else 0
        request = self._layouts.known(payload)
        if request is not None and (received or self._forwarding is not None):  # `_received` has work
            try:
                self._received(request, metadata, received)
            except Exception as exc:
                raise _infer_error(exc, request.model_name) from None
        return request

    def _received(self, request: InferRequest, metadata: Sequence[tuple[str, Any]], received: int) -> None:
        """The headers forwarded as parameters, and the trace when the request is sampled."""
        if self._forwarding is not None:
            self._forwarding.add_parameters(metadata, request.parameters)
        if received:  # the read's times go with the sample (one call where three would do)
            request.trace = self._tracer.sample(
                request.model_name,
                metadata,
                (GRPC_WAITREAD_START, received, GRPC_WAITREAD_END, time.perf_counter_ns()),
            )

    def queue(self, request: InferRequest) -> QueuedInfer:
        """The request admitted and queued, to be answered by callback (see Engine.infer_queued); raises
        the NereidError to answer instead."""
        try:
            return self._engine.infer_queued(request)
        except Exception as exc:
            self.respond(request, exc)  # which raises
            raise AssertionError("unreachable") from None

    def respond(self, request: InferRequest, result: InferResponse | BaseException) -> pb.ModelInferResponse:
        """The message answering the engine's result; raises the NereidError to answer instead. A traced
        request's trace ends here."""
        try:
            return self._answer(request, result, encode_infer_response)
        finally:
            del result  # see _answer

    def respond_serialized(self, request: InferRequest, result: InferResponse | BaseException) -> bytes:
        """`respond`, serialized (from the head of an earlier response that said the same)."""
        if request.trace is None and not isinstance(result, BaseException):  # `_answer`'s usual case
            try:
                return self._responses.serialize(result)
            except Exception as exc:
                raise _infer_error(exc, request.model_name) from None
        try:
            return self._answer(request, result, self._responses.serialize)
        finally:
            del result  # see _answer

    def _answer(
        self,
        request: InferRequest,
        result: InferResponse | BaseException,
        encode: Callable[[InferResponse], T],
    ) -> T:
        trace = request.trace
        start = 0
        try:
            if isinstance(result, BaseException):
                # The error raised is often `result` itself. A frame that holds an exception it raised is
                # in that exception's traceback: a cycle, which would keep the request (its tensors, tens
                # of MiB) and the frames it passed through alive until the cyclic collector runs, and the
                # server lets that run rarely (heap.py). So this frame and its callers drop it as it leaves.
                try:
                    raise _infer_error(result, request.model_name)
                finally:
                    del result
            if trace is not None:
                trace.complete = (
                    time.perf_counter_ns()
                )  # INFER_RESPONSE_COMPLETE, recorded with the send times
                start = time.perf_counter_ns()
            try:
                return encode(result)
            except Exception as exc:
                raise _infer_error(exc, request.model_name) from None
        finally:
            if trace is not None:  # the response is encoded: the gRPC core sends it next
                if start:
                    trace.sent(GRPC_SEND_START, start, GRPC_SEND_END)  # and closes it
                else:
                    trace.now(GRPC_SEND_END)
                    trace.close()

    def _decoupled(self, message: pb.ModelInferRequest) -> bool:
        try:
            return self._engine.is_decoupled(message.model_name, message.model_version)
        except NereidError:
            return False  # the request fails, in its turn

    async def _stream_call(
        self, message: pb.ModelInferRequest, metadata: Sequence[tuple[str, Any]] = ()
    ) -> AsyncIterator[pb.ModelStreamInferResponse | Any]:
        """One request of a stream; an unexpected exception becomes INTERNAL, logged once."""
        forwarding = self._forwarding
        forward = None if forwarding is None else lambda r: forwarding.add_parameters(metadata, r.parameters)
        try:
            async for item in request_stream(self._engine, message, forward):
                yield item
        except NereidError:
            raise
        except Exception as exc:
            log.exception("unexpected error serving ModelStreamInfer for model '%s'", message.model_name)
            raise unexpected(exc) from exc

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        # Not wrapped in _rpc: this is the hot path, and its steps turn every error into a NereidError.
        # A client that cancels the RPC cancels this coroutine, and with it the engine's request.
        metadata = ()
        if self._forwarding is not None or self._tracer.active:
            metadata = context.invocation_metadata() or ()
        calls = self.calls
        calls.active += 1
        infer_request: InferRequest | None = None
        try:
            if request is UNDECODABLE:
                raise unparsable()
            infer_request = self.decode(request, metadata)
            return await self._answer_of(self.queue(infer_request), infer_request)
        except NereidError as exc:
            error = (GRPC_STATUS[exc.status], exc.message)
        finally:
            calls.active -= 1
        # grpc.aio keeps the exception that `abort` raises in the call's state, which its traceback holds:
        # a cycle, and this frame is in that traceback. So abort outside the except block (no error chained
        # to it) from a frame that no longer holds the request, or the request (tens of MiB) would live
        # until the cyclic collector runs, which the server lets run rarely (heap.py).
        del request
        infer_request = None
        await context.abort(*error)

    async def _answer_of(self, queued: QueuedInfer, request: InferRequest) -> pb.ModelInferResponse:
        """A queued request's answer, awaited on one future instead of the engine's coroutines."""
        answered: asyncio.Future[InferResponse | BaseException] = asyncio.get_running_loop().create_future()
        queued.then(functools.partial(_settle, answered))
        try:
            result = await answered
        except asyncio.CancelledError:
            queued.cancel()
            drop(request)
            raise
        return self.respond(request, result)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        strict = any(
            key == STRICT_STREAM_KEY and str(value).lower() == "true"
            for key, value in context.invocation_metadata() or ()
        )
        call = self._stream_call
        if self._forwarding is not None:
            metadata = tuple(context.invocation_metadata() or ())
            call = functools.partial(self._stream_call, metadata=metadata)
        calls = self.calls
        calls.active += 1
        try:
            responses = stream_responses(call, request_iterator, strict, self._decoupled)
            async for response in responses:
                yield response
            return
        except NereidError as exc:
            error = (GRPC_STATUS[exc.status], exc.message)
        finally:
            calls.active -= 1
        await context.abort(*error)  # outside the except block: see ModelInfer

    # model control (explicit mode)
    @_rpc
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        config, files = load_parameters(request.parameters, request.model_name)
        await self._engine.load_model(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        if request.repository_name:
            raise Unsupported("'repository_name' specification is not supported")
        parameters = request.parameters
        dependents = "unload_dependents" in parameters and parameters["unload_dependents"].bool_param
        await self._engine.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # shared memory: an empty name means every region, as in Triton
    @_rpc
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        for region in self._engine.system_shared_memory_status(request.name or None):
            response.regions[region.name].CopyFrom(
                status(name=region.name, key=region.key, offset=region.offset, byte_size=region.byte_size)
            )
        return response

    @_rpc
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self._engine.register_system_shared_memory(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self._engine.unregister_system_shared_memory(request.name or None)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        response = pb.CudaSharedMemoryStatusResponse()
        status = pb.CudaSharedMemoryStatusResponse.RegionStatus
        for region in self._engine.cuda_shared_memory_status(request.name or None):
            response.regions[region.name].CopyFrom(
                status(name=region.name, device_id=region.device_id, byte_size=region.byte_size)
            )
        return response

    @_rpc
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        if len(request.raw_handle) != 64:  # Triton's words for a handle it cannot open
            raise InvalidArgument(
                f"failed to register shared memory region '{request.name}': invalid args (a cudaIpcMemHandle_t "
                f"is 64 bytes, got {len(request.raw_handle)})"
            )
        # the registry takes the handle as HTTP carries it, in base64
        handle = base64.b64encode(request.raw_handle).decode("ascii")
        self._engine.register_cuda_shared_memory(request.name, handle, request.device_id, request.byte_size)
        return pb.CudaSharedMemoryRegisterResponse()

    @_rpc
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self._engine.unregister_cuda_shared_memory(request.name or None)
        return pb.CudaSharedMemoryUnregisterResponse()

    # trace extension
    @_rpc
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Context
    ) -> pb.TraceSettingResponse:
        answer = self._engine.trace_setting(request.model_name)  # an unknown model is refused first
        update = grpc_update({key: list(value.value) for key, value in request.settings.items()})
        if update is not None:
            answer = self._engine.trace_setting(request.model_name, update)
        response = pb.TraceSettingResponse()
        for key, value in answer:
            response.settings[key].value.extend([value] if isinstance(value, str) else value)
        return response

    # logging extension: an empty request reads the settings
    @_rpc
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> pb.LogSettingsResponse:
        values = {key: _setting_value(value) for key, value in request.settings.items()}
        settings = self._engine.update_log_settings(values, typed=True) if values else None
        response = pb.LogSettingsResponse()
        for key, value in (settings or self._engine.log_settings()).as_dict().items():
            field = (
                "bool_param"
                if isinstance(value, bool)
                else "uint32_param"
                if isinstance(value, int)
                else "string_param"
            )
            setattr(response.settings[key], field, value)
        return response
