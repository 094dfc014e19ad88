"""Calls from model code back into the server (BLS requests, model control), served on the event loop.

A BLS request runs through the engine like a client's, so the target model's scheduler (and batching)
applies. It is served by a task of its own, apart from the calling instance, whose execute waits for the
answer meanwhile: the caller being busy never holds the callee up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from nereid.backends.python.worker import wire
from nereid.engine_client import ModelServices
from nereid.errors import InvalidArgument, NereidError, NotFound, Unavailable, unexpected
from nereid.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)

log = logging.getLogger("nereid.backends.python")

Reply = Callable[[tuple[Any, ...]], None]


async def serve_bls(server: ModelServices | None, frame: tuple[Any, ...], reply: Reply) -> None:
    """Answer one BLS frame with BLS_RESPONSE frames, the last one final."""
    _, call_id, model_name, version, decoupled, raw = frame
    try:
        request = _infer_request(model_name, version, raw)
        answered = False
        async for event in _connected(server).infer_stream(request):
            if not decoupled and (answered or not event.final):
                raise InvalidArgument(
                    f"model '{model_name}' sends many responses (it is decoupled): call exec(decoupled=True)"
                )
            if event.error is not None:
                result: tuple[Any, ...] | None = _error(event.error)
            elif event.response is not None:
                result = _outputs(event.response)
            else:
                result = None
            answered = True
            reply((wire.BLS_RESPONSE, call_id, event.final, result))
    except NotFound as exc:  # no such model or version: Triton's BLS finds it not ready
        message = (
            f"Model {model_name} - Error when running inference: Failed for execute the inference request. "
            f"Model '{model_name}' is not ready."
        )
        reply((wire.BLS_RESPONSE, call_id, True, _error(type(exc)(message))))
    except NereidError as exc:
        reply((wire.BLS_RESPONSE, call_id, True, _error(exc)))
    except Exception as exc:
        log.exception("unexpected error serving a BLS request to model '%s'", model_name)
        reply((wire.BLS_RESPONSE, call_id, True, _error(unexpected(exc))))


async def serve_control(server: ModelServices | None, frame: tuple[Any, ...], reply: Reply) -> None:
    """load_model, unload_model and is_model_ready, answered with CONTROL_DONE."""
    _, call_id, action, model_name, argument = frame
    try:
        value: Any = None
        if action == "load":
            config, files = argument
            await _connected(server).load_model(model_name, config or None, files or None)
        elif action == "unload":
            await _connected(server).unload_model(model_name)
        elif action == "ready":
            value = await _connected(server).model_ready(model_name, argument)
        else:
            raise InvalidArgument(f"unknown model control action '{action}'")
        reply((wire.CONTROL_DONE, call_id, True, value))
    except NereidError as exc:
        reply((wire.CONTROL_DONE, call_id, False, exc.message))
    except Exception as exc:
        log.exception("unexpected error in %s of model '%s' from model code", action, model_name)
        reply((wire.CONTROL_DONE, call_id, False, unexpected(exc).message))


def _connected(server: ModelServices | None) -> ModelServices:
    if server is None:
        raise Unavailable("no inference server runs in this process to answer calls from model code")
    return server


def _infer_request(model_name: str, version: int, raw: tuple[Any, ...]) -> InferRequest:
    request_id, correlation_id, flags, parameters_json, timeout_us, output_names, inputs = raw
    tensors = [
        InferTensor(name, datatype, tuple(shape), wire.inline_array(datatype, shape, data))
        for name, datatype, shape, data in inputs
    ]
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


def _outputs(response: InferResponse) -> tuple[Any, ...]:
    tensors = tuple(wire.inline_tensor(t.name, t.datatype, t.data) for t in response.outputs)
    return (True, tensors, orjson.dumps(response.parameters).decode() if response.parameters else "{}")


def _error(error: NereidError) -> tuple[Any, ...]:
    return (False, error.status.value, error.message)
