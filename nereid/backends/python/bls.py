"""Calls from model code back into the server (BLS requests, model control), served on the event loop.

A BLS request runs through the engine like a client's, so the target model's scheduler (and batching)
applies. It is served by a task of its own, apart from the calling instance, whose execute waits for the
answer meanwhile: the caller being busy never holds the callee up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from nereid.backends.python.worker import wire
from nereid.core.engine_client import ModelServices
from nereid.errors import InvalidArgument, NereidError, NotFound, Unavailable, unexpected
from nereid.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)

if TYPE_CHECKING:
    from nereid.tracing.trace import RequestTrace

log = logging.getLogger("nereid.backends.python")

Reply = Callable[[tuple[Any, ...]], None]


async def serve_bls(
    server: ModelServices | None,
    frame: tuple[Any, ...],
    reply: Reply,
    find_trace: Callable[[int], RequestTrace | None] | None = None,
) -> None:
    """Answer one BLS frame with BLS_RESPONSE frames, the last one final. `find_trace` finds the traced
    requests the model is executing, by trace id: a BLS request made with one's `trace()` is its child."""
    _, call_id, model_name, version, decoupled, raw = frame

    def answer(final: bool, result: InferResponse | NereidError | None) -> None:
        if isinstance(result, NereidError):
            encoded: tuple[Any, ...] | None = _error(result)
        else:
            encoded = None if result is None else _outputs(result)
        reply((wire.BLS_RESPONSE, call_id, final, encoded))

    request_id, correlation_id, flags, parameters_json, timeout_us, output_names, inputs, trace_id = raw
    try:
        tensors = [
            InferTensor(name, datatype, tuple(shape), wire.inline_array(datatype, shape, data))
            for name, datatype, shape, data in inputs
        ]
        request = infer_request(
            model_name,
            version,
            tensors,
            request_id,
            correlation_id,
            flags,
            parameters_json,
            timeout_us,
            output_names,
        )
    except Exception as exc:
        log.exception("a malformed BLS request to model '%s'", model_name)
        answer(True, unexpected(exc))
        return
    parent = find_trace(trace_id) if trace_id and find_trace is not None else None
    await run_bls(server, request, decoupled, answer, parent)


async def run_bls(
    server: ModelServices | None,
    request: InferRequest,
    decoupled: bool,
    answer: Callable[[bool, InferResponse | NereidError | None], None],
    parent: RequestTrace | None = None,
) -> None:
    """Run a BLS request through the engine; `answer(final, response, error or None)` gets each response,
    the last one final. Never raises: failures are answered. With the `parent` trace of the request the
    model executes, the BLS request is traced as its child."""
    model_name = request.model_name
    if parent is not None:
        request.trace = parent.child()
    try:
        answered = False
        async for event in _connected(server).infer_stream(request):
            if not decoupled and (answered or not event.final):
                raise InvalidArgument(
                    f"model '{model_name}' sends many responses (it is decoupled): call exec(decoupled=True)"
                )
            answered = True
            answer(event.final, event.error if event.error is not None else event.response)
    except NotFound as exc:  # no such model or version: Triton's BLS finds it not ready
        message = (
            f"Model {model_name} - Error when running inference: Failed for execute the inference request. "
            f"Model '{model_name}' is not ready."
        )
        answer(True, type(exc)(message))
    except NereidError as exc:
        answer(True, exc)
    except Exception as exc:
        log.exception("unexpected error serving a BLS request to model '%s'", model_name)
        answer(True, unexpected(exc))
    finally:
        if request.trace is not None:
            request.trace.close()


async def serve_control(server: ModelServices | None, frame: tuple[Any, ...], reply: Reply) -> None:
    """load_model, unload_model and is_model_ready, answered with CONTROL_DONE."""
    _, call_id, action, model_name, argument = frame
    try:
        value = await control(server, action, model_name, argument)
        reply((wire.CONTROL_DONE, call_id, True, value))
    except NereidError as exc:
        reply((wire.CONTROL_DONE, call_id, False, exc.message))


async def control(server: ModelServices | None, action: str, model_name: str, argument: Any) -> Any:
    """load_model, unload_model or is_model_ready from model code; raises NereidError when refused."""
    server = _connected(server)
    try:
        if action == "load":
            config, files = argument
            await server.load_model(model_name, config or None, files or None)
            return None
        if action == "unload":
            await server.unload_model(model_name)
            return None
        if action == "ready":
            return await server.model_ready(model_name, argument)
    except NereidError:
        raise
    except Exception as exc:
        log.exception("unexpected error in %s of model '%s' from model code", action, model_name)
        raise unexpected(exc) from None
    raise InvalidArgument(f"unknown model control action '{action}'")


def infer_request(
    model_name: str,
    version: int,
    tensors: list[InferTensor],
    request_id: str,
    correlation_id: int | str,
    flags: int,
    parameters_json: str,
    timeout_us: int,
    output_names: Sequence[str],
) -> InferRequest:
    """A BLS request as the engine takes it: pb_utils' fields, the sequence controls typed."""
    outputs = [RequestedOutput(name) for name in output_names] if output_names else None
    return InferRequest(
        model_name,
        "" if version < 0 else str(version),
        tensors,
        outputs,
        request_id,
        orjson.loads(parameters_json) if parameters_json else {},
        sequence_id=correlation_id,
        flags=flags & (SEQUENCE_START | SEQUENCE_END),
        timeout_us=timeout_us,
    )


def _connected(server: ModelServices | None) -> ModelServices:
    if server is None:
        raise Unavailable("no inference server runs in this process to answer calls from model code")
    return server


def _outputs(response: InferResponse) -> tuple[Any, ...]:
    tensors = tuple(wire.inline_tensor(t.name, t.datatype, t.data) for t in response.outputs)
    return (True, tensors, orjson.dumps(response.parameters).decode() if response.parameters else "{}")


def _error(error: NereidError) -> tuple[Any, ...]:
    return (False, error.status.value, error.message)
