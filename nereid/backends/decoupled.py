"""Triton's decoupled example backends, `repeat` and `square`: zero, one or many responses per request.

`repeat` (inputs IN: INT32 [n], DELAY: UINT32 [n], WAIT: UINT32 [1]; outputs OUT, IDX): the i'th
response, sent DELAY[i] ms after the previous one, carries OUT = IN[i] and IDX = i. The execution itself
returns after WAIT ms, possibly before every response is out, so one instance can answer several
requests at a time. A repeat model that is not decoupled answers a one-element request with its one
response.

`square` (input IN: INT32 [1]; output OUT): IN[0] responses, each with OUT = IN[0]. Parameters
CUSTOM_INFER_DELAY_NS and CUSTOM_OUTPUT_DELAY_NS delay each response; CUSTOM_FAIL_COUNT and
CUSTOM_EMPTY_COUNT make the last responses errors ("simulated failure") or leave them out. A cancelled
request gets one CANCELLED error (after CUSTOM_CANCEL_DELAY_NS) and no more. Square reports each
response's statistics (Triton's response_stats); repeat reports none.

Both end every request with a final flag of its own, after the responses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.builtin import (
    BuiltinBackend,
    ResponderThreads,
    config_error,
    send,
    sleep_ms,
    tensor_dims,
)
from nereid.backends.framework import parameters, per_request
from nereid.backends.responses import ResponseStream
from nereid.errors import Cancelled, InternalError, InvalidArgument, NereidError, Unsupported


def _stream(request: BackendRequest) -> ResponseStream:
    if request.stream is None:
        raise Unsupported("this backend is decoupled: set model_transaction_policy { decoupled: true }")
    return request.stream


def _vector(request: BackendRequest, name: str, dtype: type) -> np.ndarray:
    array = request.inputs.get(name)
    if array is None:
        raise InvalidArgument(f"failed to get input '{name}'")
    return np.asarray(array).reshape(-1).astype(dtype)


def _expect(config: mc.ModelConfig, tensors: object, kind: str, wanted: Sequence[tuple[str, int]]) -> None:
    listed = [(t.name, t.data_type) for t in tensors]  # type: ignore[attr-defined]
    if listed != list(wanted):
        names = ", ".join(f"{n} ({mc.DataType.Name(d)})" for n, d in wanted)
        raise config_error(config, f"expected {kind}s {names} in this order")


class RepeatBackend(BuiltinBackend):
    name = "repeat"

    def check(self, config: mc.ModelConfig, model_file: object) -> None:
        _expect(
            config,
            config.input,
            "input",
            [("IN", mc.TYPE_INT32), ("DELAY", mc.TYPE_UINT32), ("WAIT", mc.TYPE_UINT32)],
        )
        _expect(config, config.output, "output", [("OUT", mc.TYPE_INT32), ("IDX", mc.TYPE_UINT32)])
        if tensor_dims(config.input[0]) != tensor_dims(config.input[1]):
            raise config_error(config, "expected IN and DELAY shape to match")

    def create_instance(self, spec: InstanceSpec) -> RepeatInstance:
        self.refuse_gpu(spec)
        return RepeatInstance()


class _DecoupledInstance:
    """Each request's responses come from a thread of their own; execute() answers {} for the request."""

    def __init__(self) -> None:
        self._responders = ResponderThreads()

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return per_request(requests, lambda request: self._run(_stream(request), request))

    def _run(self, stream: ResponseStream, request: BackendRequest) -> Outputs:
        raise NotImplementedError

    def close(self) -> None:
        self._responders.join()


class RepeatInstance(_DecoupledInstance):
    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return per_request(
            requests,
            lambda request: (
                self._one(request) if request.stream is None else self._run(request.stream, request)
            ),
        )

    @staticmethod
    def _one(request: BackendRequest) -> Outputs:
        """Not decoupled: the one response, once it is sent (after DELAY) and execute returned (after
        WAIT), which is when Triton's repeat completes the request."""
        values = _vector(request, "IN", np.int32)
        delays = _vector(request, "DELAY", np.uint32)
        wait = _vector(request, "WAIT", np.uint32)
        if values.size != 1 or delays.size != 1 or wait.size != 1:
            raise Unsupported(
                f"without a decoupled transaction policy, repeat answers a request of one element, got {values.size}"
            )
        sleep_ms(max(int(delays[0]), int(wait[0])))
        return {"OUT": values.copy(), "IDX": np.array([0], np.uint32)}

    def _run(self, stream: ResponseStream, request: BackendRequest) -> Outputs:
        values = _vector(request, "IN", np.int32)
        delays = _vector(request, "DELAY", np.uint32)
        wait = _vector(request, "WAIT", np.uint32)
        if wait.size != 1:
            raise InvalidArgument("unexpected size for WAIT input")
        if values.shape != delays.shape:
            raise InvalidArgument(
                f"expected IN and DELAY shape to match, got [{values.size}] and [{delays.size}]"
            )
        self._responders.start(self._respond, stream, values, delays)
        sleep_ms(int(wait[0]))
        return {}

    @staticmethod
    def _respond(stream: ResponseStream, values: np.ndarray, delays: np.ndarray) -> None:
        for index, (value, delay) in enumerate(zip(values, delays, strict=True)):
            sleep_ms(int(delay))
            if stream.cancelled:
                break
            outputs = {"OUT": np.array([value], np.int32), "IDX": np.array([index], np.uint32)}
            send(stream, outputs, False)
        send(stream, None, True)


class SquareBackend(BuiltinBackend):
    name = "square"

    def check(self, config: mc.ModelConfig, model_file: object) -> None:
        _expect(config, config.input, "input", [("IN", mc.TYPE_INT32)])
        _expect(config, config.output, "output", [("OUT", mc.TYPE_INT32)])

    def create_instance(self, spec: InstanceSpec) -> SquareInstance:
        self.refuse_gpu(spec)
        return SquareInstance(spec.config)


def _count_parameter(config: mc.ModelConfig, key: str) -> int:
    """Square's parameters: a non-negative integer, anything else leaves the default (0), as in Triton."""
    text = parameters(config).get(key, "").strip()
    return int(text) if text.isdigit() else 0


class SquareInstance(_DecoupledInstance):
    def __init__(self, config: mc.ModelConfig) -> None:
        super().__init__()
        self._infer_delay_ms = _count_parameter(config, "CUSTOM_INFER_DELAY_NS") / 1e6
        self._output_delay_ms = _count_parameter(config, "CUSTOM_OUTPUT_DELAY_NS") / 1e6
        self._cancel_delay_ms = _count_parameter(config, "CUSTOM_CANCEL_DELAY_NS") / 1e6
        self._fail = _count_parameter(config, "CUSTOM_FAIL_COUNT")
        self._empty = _count_parameter(config, "CUSTOM_EMPTY_COUNT")

    def _run(self, stream: ResponseStream, request: BackendRequest) -> Outputs:
        values = _vector(request, "IN", np.int32)
        if values.size != 1:
            raise InvalidArgument(f"expected IN to hold one element, got {values.size}")
        count = int(values[0])
        if count < 0:
            raise InvalidArgument(f"IN must not be negative, got {count}")
        self._responders.start(self._respond, stream, count)
        return {}

    def _respond(self, stream: ResponseStream, count: int) -> None:
        """Each response reports its statistics before it goes out, so that a client that has it finds
        it counted."""
        for index in range(count):
            start = time.perf_counter_ns()
            if stream.cancelled:
                sleep_ms(self._cancel_delay_ms)
                stream.record_response("cancel", start)
                send(stream, Cancelled("cancelled"), False)
                break
            sleep_ms(self._infer_delay_ms)
            if index + self._empty >= count:
                stream.record_response("empty_response", start)  # nothing is sent
                continue
            output_start = time.perf_counter_ns()
            sleep_ms(self._output_delay_ms)
            result: Outputs | NereidError
            if index + self._fail + self._empty >= count:
                result = InternalError("simulated failure")
                stream.record_response("fail", start, output_start)
            else:
                result = {"OUT": np.array([count], np.int32)}
                stream.record_response("success", start, output_start)
            send(stream, result, False)
        send(stream, None, True)


def create_repeat_backend() -> RepeatBackend:
    return RepeatBackend()


def create_square_backend() -> SquareBackend:
    return SquareBackend()
