"""Triton's generate extension (`generate`, `generate_stream`) and streamed `infer` for decoupled models.

A generate body is a flat JSON object: a key naming a model input is that input (a value or a flat list,
shaped by the input's dims, with a batch of one for batching models), `id` is the request id,
`parameters` an object of parameters, and any other key a parameter too. A response is a flat object
too: each output by name (a single value, or the flattened list), `model_name`, `model_version`, `id`.

`generate` wants exactly one response; `generate_stream` sends each response as a server-sent event,
and errors as `{"error": ...}` events. The status is decided by the first response, as in Triton: an
error there answers 400. Going beyond Triton, `infer` streams a decoupled model's responses as
server-sent events of ordinary infer response bodies when the client sends `Accept: text/event-stream`.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import numpy as np
import orjson

from nereid.core.engine_client import EngineClient
from nereid.errors import InternalError, InvalidArgument
from nereid.frontends.http import json_body
from nereid.frontends.http.codec import decode_infer_request, encode_infer_response, error_body
from nereid.frontends.http.protocol import HttpResponse
from nereid.tracing.trace import INFER_RESPONSE_COMPLETE, RequestTrace
from nereid.types import InferRequest, InferResponse, StreamEvent

_JSON = (b"content-type", b"application/json")
_EVENTS = (b"content-type", b"text/event-stream; charset=utf-8")
_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates "
    "various number of responses"
)


def wants_events(accept: str | None) -> bool:
    return accept is not None and "text/event-stream" in accept


def generate_request(engine: EngineClient, name: str, version: str, body: bytes) -> InferRequest:
    """The infer request a generate body stands for; inputs checked as an infer body's would be."""
    document = _json_object(body)
    metadata = engine.model_metadata(name, version)
    batched = metadata.max_batch_size > 0
    specs = {t.name: t for t in metadata.inputs}
    _refuse_repeated_inputs(body, specs)
    inputs: list[dict[str, Any]] = []
    parameters: dict[str, Any] = {}
    request_id = ""
    for key, value in document.items():
        spec = specs.get(key)
        if spec is not None:
            data = value if isinstance(value, list) else [value]
            _check_json_type(spec.datatype, data)
            if any(isinstance(item, (list, dict)) for item in data):
                raise InternalError("Unable to parse 'data': Shape does not match true shape of 'data' field")
            shape = _shape(key, spec.shape[1:] if batched else spec.shape, len(data), batched)
            inputs.append({"name": key, "datatype": spec.datatype, "shape": shape, "data": data})
        elif key == "id":
            request_id = str(value)
        elif key == "parameters":
            if not isinstance(value, dict):
                raise InternalError(
                    "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
                )
            for nested_key, nested in value.items():
                if not isinstance(nested, (bool, int, float, str)):
                    raise InvalidArgument(
                        f"Converting keyword: 'parameters': parameter '{nested_key}' has invalid type. It should "
                        "be either 'int', 'bool', or 'string'."
                    )
            parameters.update(value)
        elif isinstance(value, (bool, int, str)):
            parameters[key] = value
        else:
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )
    infer_body: dict[str, Any] = {"inputs": inputs}
    if request_id:
        infer_body["id"] = request_id
    if parameters:
        infer_body["parameters"] = parameters
    return decode_infer_request(orjson.dumps(infer_body), None, name, version)


def _check_json_type(datatype: str, data: list[Any]) -> None:
    """Triton's words (its JSON reader's) for a value of the wrong JSON type, checked in document order."""
    if datatype == "BYTES":
        if not all(isinstance(item, str) for item in data):
            raise InternalError(
                "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
            )
    elif datatype == "BOOL" and not all(isinstance(item, bool) for item in data):
        raise InternalError("attempt to access JSON non-boolean as boolean")


def _refuse_repeated_inputs(body: bytes, specs: dict[str, Any]) -> None:
    """A key given twice keeps its last value in a parsed object; Triton adds each as an input and refuses
    the second. Only bodies that repeat an input name are parsed a second time, with the pairs kept."""
    if not any(body.count(b'"%s"' % name.encode()) > 1 for name in specs):
        return
    top: list[tuple[str, Any]] = []

    def keep(items: list[tuple[str, Any]]) -> dict[str, Any]:
        top[:] = items  # the top-level object is the last one the decoder completes
        return dict(items)

    json.loads(body, object_pairs_hook=keep)
    seen: set[str] = set()
    for key, _ in top:
        if key in specs:
            if key in seen:
                raise InvalidArgument(f"input '{key}' already exists in request")
            seen.add(key)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        document = json_body.loads(body)
    except orjson.JSONDecodeError as exc:  # Triton answers these 500
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None
    if isinstance(document, dict):
        return document
    raise InternalError("attempt to get members for non-object")


def _shape(name: str, dims: tuple[int, ...], count: int, batched: bool) -> list[int]:
    known = math.prod(d for d in dims if d >= 0)
    shape = list(dims)
    wildcards = [index for index, d in enumerate(shape) if d < 0]
    if wildcards:  # the first takes what the count leaves, the others one each
        for index in wildcards:
            shape[index] = 1
        shape[wildcards[0]] = count // known if known else 0
    if math.prod(shape) != count:
        raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
    return ([1] if batched else []) + shape


def _flat_response(response: InferResponse) -> bytes:
    document: dict[str, Any] = {}
    for tensor in response.outputs:
        flat = tensor.data.reshape(-1)
        if tensor.datatype == "BYTES":
            values: list[Any] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat
            ]
        else:
            values = (
                flat.astype(np.float32).tolist() if tensor.datatype in ("FP16", "BF16") else flat.tolist()
            )
        document[tensor.name] = values[0] if len(values) == 1 else values
    if response.id:
        document["id"] = response.id
    document["model_name"] = response.model_name
    document["model_version"] = response.model_version
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


async def _first(events: AsyncGenerator[StreamEvent, None]) -> StreamEvent | None:
    """The first event; errors found before the model ran are raised from here, answered as usual."""
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None
    except BaseException:
        await events.aclose()
        raise


def traced_events(engine: EngineClient, request: InferRequest) -> AsyncGenerator[StreamEvent, None]:
    """The request's stream of events, each response's time recorded where it is traced."""
    events = engine.infer_stream(request)
    return events if request.trace is None else _traced(events, request.trace)


async def _traced(
    events: AsyncGenerator[StreamEvent, None], trace: RequestTrace
) -> AsyncGenerator[StreamEvent, None]:
    """Each response (the final flag alone too) as it comes: INFER_RESPONSE_COMPLETE, as Triton records."""
    try:
        async for event in events:
            trace.now(INFER_RESPONSE_COMPLETE)
            yield event
    finally:
        await events.aclose()


async def generate(engine: EngineClient, request: InferRequest) -> HttpResponse:
    events = traced_events(engine, request)
    first = await _first(events)
    try:
        if first is not None and first.error is not None:
            return HttpResponse(400, error_body(first.error.message), [_JSON])
        if first is None or first.response is None:
            return HttpResponse(200, error_body(_ONE_RESPONSE), [_JSON])
        if not first.final:
            async for event in events:
                if event.response is not None or event.error is not None:
                    return HttpResponse(200, error_body(_ONE_RESPONSE), [_JSON])
        return HttpResponse(200, _flat_response(first.response), [_JSON])
    finally:
        await events.aclose()


async def event_stream(engine: EngineClient, request: InferRequest, flat: bool) -> HttpResponse:
    """Server-sent events: generate_stream's (`flat`) or streamed infer's (infer response bodies)."""
    events = traced_events(engine, request)
    first = await _first(events)
    status = 400 if first is not None and first.error is not None else 200
    return HttpResponse(status, b"", [_EVENTS], stream=_sse(first, events, request, flat))


async def _sse(
    first: StreamEvent | None, events: AsyncGenerator[StreamEvent, None], request: InferRequest, flat: bool
) -> AsyncIterator[bytes]:
    try:
        if first is not None:
            yield _event(first, request, flat)
            async for event in events:
                yield _event(event, request, flat)
    finally:
        await events.aclose()


def _event(event: StreamEvent, request: InferRequest, flat: bool) -> bytes:
    if event.error is not None:
        return b"data: " + error_body(event.error.message) + b"\n\n"
    if event.response is None:
        return b""  # the final flag alone: nothing to send
    if flat:
        body = _flat_response(event.response)
    else:
        body, _ = encode_infer_response(event.response, _json_only(request))
    return b"data: " + body + b"\n\n"


def _json_only(request: InferRequest) -> InferRequest:
    """Events are text: outputs go as JSON whatever the request asked."""
    if not request.outputs and request.parameters.get("binary_data_output") is not True:
        return request
    return InferRequest(request.model_name, request.model_version, [], None, request.id, {})
