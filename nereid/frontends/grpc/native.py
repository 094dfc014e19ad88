"""pygrpc-native's asyncio server, with ModelInfer calls answered by callback.

The server runs each call as a Task through several coroutines (its own, then the servicer's, then the
engine's); for a model that takes microseconds that is a good share of a request's CPU. Here a ModelInfer
call is parsed, decoded and queued as its event arrives, and the dynamic batcher's callback encodes and
sends the answer (see Engine.infer_queued): no Task, no context, no coroutine per request. Calls that
this does not take (with interceptors, oversized or malformed messages, other methods) go to the
server's own path, which answers them as before.

The pending calls sit in the server's table of calls, so that its handling of a client that cancels and of
stop (in-flight calls answered within the grace period, then cancelled) covers them. This leans on the
server's internals (`_on_events`, `_calls`, `_table`); `native_server` checks they are there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pygrpc_native.aio
from pygrpc_native import EVENT_CALL
from tritonclient.grpc import service_pb2 as pb

from nereid.core.engine_client import QueuedInfer
from nereid.errors import NereidError
from nereid.frontends.grpc.servicer import InferenceServicer, drop
from nereid.frontends.grpc.status import GRPC_STATUS
from nereid.host import available_cpus
from nereid.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_HOOKS = ("_on_events", "_calls", "_table", "_front", "_loop", "_receive_limit", "_within_send_limit")


def io_threads() -> int:
    """Threads for the native core's HTTP/2 work: one on a host with two CPUs or fewer, else two.

    One such thread moves far more calls than the event loop can serve, so a second one only helps where
    it has a CPU to itself. On two CPUs it is one more thread to wake and switch to: with perf_analyzer at
    concurrency 16 against a batched Python model, one thread served 1.02 to 1.26 times the calls of two
    (five alternating runs), at about 10% less CPU per call."""
    return 1 if available_cpus() <= 2 else 2


def native_server(servicer: InferenceServicer, **kwargs: Any) -> pygrpc_native.aio.Server:
    """The server with ModelInfer by callback; pygrpc-native's own where its internals differ from the
    ones this was written for (every call then takes its ordinary path)."""
    kwargs.setdefault("io_threads", io_threads())
    probe = pygrpc_native.aio.Server(**kwargs)
    if not all(hasattr(probe, name) for name in _HOOKS):
        log.warning("pygrpc-native %s: ModelInfer takes the general path", pygrpc_native.__version__)
        return probe
    return NativeServer(servicer, **kwargs)


class NativeServer(pygrpc_native.aio.Server):
    def __init__(self, servicer: InferenceServicer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._servicer = servicer
        self._infer_method = -1  # the front's id of ModelInfer, once started without interceptors

    async def start(self) -> None:
        await super().start()
        if not self._interceptors:  # they decide per call, on the general path
            for index, (path, _) in enumerate(self._table):
                if path == INFER_METHOD:
                    self._infer_method = index

    def _on_events(self, events: list[tuple[Any, ...]]) -> None:
        infer_method = self._infer_method
        rest = []
        for event in events:
            if event[2] != infer_method or event[0] != EVENT_CALL or self._stopping or not self._infer(event):
                rest.append(event)
        if rest:
            super()._on_events(rest)

    def _infer(self, event: tuple[Any, ...]) -> bool:
        """Serve a ModelInfer call; False leaves it to the general path."""
        _, call_id, _, payload, _, details = event
        limit = self._receive_limit
        if limit is not None and len(payload) > limit:
            return False
        servicer = self._servicer
        metadata = details[0] if details else ()
        try:
            request = servicer.decode_known(payload, metadata)
            if request is None:
                try:
                    message = pb.ModelInferRequest.FromString(payload)
                except Exception:
                    return False  # the general path logs it and answers INTERNAL, as grpc does
                request = servicer.decode(message, metadata, payload)
            queued = servicer.queue(request)
        except NereidError as exc:
            self._front.fail(call_id, GRPC_STATUS[exc.status].value[0], exc.message)  # type: ignore[union-attr]
            return True
        call = _InferCall(self, call_id, request, queued)
        self._calls[call_id] = call  # type: ignore[assignment]
        servicer.calls.active += 1  # until it leaves the table: what a stopping server waits for
        queued.then(call.answered)
        return True

    async def stop(self, grace: float | None) -> None:
        if not self._stopping:
            # A queued call gets a future for the server to wait on and cancel, as it does its Tasks.
            for call in tuple(self._calls.values()):
                if isinstance(call, _InferCall) and call.task is None:
                    call.task = self._loop.create_future()  # type: ignore[union-attr]
                    call.task.add_done_callback(call.drained)
        await super().stop(grace)


class _InferCall:
    """A ModelInfer call in flight, answered by its scheduler's callback; `task`, a future the server waits
    on as it stops."""

    __slots__ = ("_server", "call_id", "_request", "_queued", "task")

    def __init__(
        self, server: NativeServer, call_id: int, request: InferRequest, queued: QueuedInfer
    ) -> None:
        self._server = server
        self.call_id = call_id
        self._request = request
        self._queued = queued
        self.task: asyncio.Future[Any] | None = None

    def cancel(self) -> None:
        """The client went away (or its deadline passed): nothing is sent."""
        if not self._release():
            return  # answered already
        self._queued.cancel()
        drop(self._request)

    def drained(self, future: asyncio.Future[Any]) -> None:
        """The server stops and cancelled the future it waited on: withdraw the request."""
        if future.cancelled() and self._server._calls.get(self.call_id) is self:
            self.cancel()

    def answered(self, result: InferResponse | BaseException) -> None:
        server = self._server
        if not self._release():
            return  # cancelled
        if self.task is not None and not self.task.done():
            self.task.set_result(None)
        try:
            data = server._servicer.respond_serialized(self._request, result)
        except NereidError as exc:
            self._fail(GRPC_STATUS[exc.status], exc.message)
            return
        self._send(data)

    def _release(self) -> bool:
        """Take the call out of the server's table; False if it was out already."""
        server = self._server
        if server._calls.pop(self.call_id, None) is None:
            return False
        server._servicer.calls.active -= 1
        return True

    def _send(self, data: bytes) -> None:
        server = self._server
        if server._within_send_limit(self, data) is not None:
            server._front.respond(self.call_id, data)  # type: ignore[union-attr]

    def _fail(self, code: grpc.StatusCode, message: str) -> None:
        self._server._front.fail(self.call_id, code.value[0], message)  # type: ignore[union-attr]
