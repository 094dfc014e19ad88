"""Requests into EXECUTE frames and RESULT frames back into outputs and errors, on the server side."""

from __future__ import annotations

from typing import Any

import orjson

from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.python.worker import wire
from nereid.custom_metrics import MetricError, MetricsScope
from nereid.errors import (
    AlreadyExists,
    Cancelled,
    InternalError,
    InvalidArgument,
    NereidError,
    NotFound,
    Status,
    Unavailable,
    Unsupported,
)


class _UnknownError(NereidError):
    status = Status.UNKNOWN


# The status a model gives a response error (pb_utils.TritonError codes, by name) -> what clients get.
ERRORS: dict[str, type[NereidError]] = {
    "UNKNOWN": _UnknownError,
    "INTERNAL": InternalError,
    "NOT_FOUND": NotFound,
    "INVALID_ARG": InvalidArgument,
    "UNAVAILABLE": Unavailable,
    "UNSUPPORTED": Unsupported,
    "ALREADY_EXISTS": AlreadyExists,
    "CANCELLED": Cancelled,
}


def encode_request(writer: wire.TensorWriter, request: BackendRequest, stream_id: int = 0) -> tuple[Any, ...]:
    """A request as EXECUTE carries it (see wire.py), its inputs reserved in the writer's arena."""
    inputs = []
    for name, data in request.inputs.items():
        datatype = wire.datatype_of(data.dtype)
        if datatype is None:
            raise InvalidArgument(
                f"input '{name}' has numpy dtype {data.dtype}, which Python models cannot take"
            )
        inputs.append(writer.add(name, datatype, data))
    trace = request.trace
    # a traced request's trace id, with its context where it has one (a tuple pickles with more work)
    traced = None if trace is None else (trace.id, trace.context()) if trace.has_context else trace.id
    return (*request_fields(request), tuple(inputs), stream_id, traced)


def request_fields(request: BackendRequest) -> tuple[str, int | str, int, str, int, tuple[str, ...]]:
    """What model code learns of a request besides its inputs: id, correlation id, flags, parameters (as
    JSON text), timeout and requested outputs, in pb_utils' order."""
    parameters = request.parameters
    return (
        request.id,
        request.correlation_id,
        request.flags,
        orjson.dumps(parameters).decode() if parameters else "{}",
        request.timeout_us,
        request.outputs,
    )


def instance_args(spec: InstanceSpec, config_json: str) -> dict[str, str]:
    """The `args` a model's initialize gets, as Triton names them."""
    return {
        "model_config": config_json,
        "model_instance_kind": spec.kind,
        "model_instance_name": spec.instance_name,
        "model_instance_device_id": str(spec.device_id),
        "model_repository": str(spec.model_dir),
        "model_version": str(spec.version),
        "model_name": spec.model_name,
    }


def response_error(status: str, message: str) -> NereidError:
    """A model's error response, marked as an answer of the model (see NereidError.answered)."""
    error = ERRORS.get(status, InternalError)(message)
    error.answered = True
    return error


def decode_inline_result(result: tuple[Any, ...] | None) -> Outputs | NereidError | None:
    """A response of a RESPONSE frame: outputs (tensors inline), an error, or None (the final flag alone)."""
    if result is None:
        return None
    if not result[0]:
        _, status, message = result
        return ERRORS.get(status, InternalError)(message)
    return {name: wire.inline_array(dt, shape, data) for name, dt, shape, data in result[1]}


def decode_result(arena: wire.Arena | None, result: tuple[Any, ...]) -> BackendResult:
    """One request's result from a RESULT frame: its outputs, copied out of the worker's arena, or its error."""
    if not result[0]:
        _, status, message = result
        return response_error(status, message)
    outputs: Outputs = {}
    for name, datatype, shape, offset, nbytes in result[1]:
        if arena is None:
            raise InternalError("a Python worker sent outputs before sharing its memory")
        data = arena.array(datatype, shape, offset, nbytes)
        outputs[name] = data if datatype == "BYTES" else data.copy()  # out of the arena, which is reused
    return outputs


def metric_answer(scope: MetricsScope | None, frame: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Run a METRIC frame's operation; the CONTROL_DONE frame that answers it (None: no answer wanted)."""
    _, call_id, operation, args = frame
    try:
        if scope is None:
            raise MetricError("custom metrics are not available: this server exports no metrics")
        value, ok = scope.call(operation, args), True
    except MetricError as exc:
        value, ok = str(exc), False
    except (TypeError, ValueError) as exc:  # arguments model code got wrong (a label value not a string...)
        value, ok = f"Invalid metric operation: {exc}", False
    return None if call_id == 0 else (wire.CONTROL_DONE, call_id, ok, value)
