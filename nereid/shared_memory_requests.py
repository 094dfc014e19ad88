"""Infer requests whose tensors are all in shared memory, decoded once per message.

Such a request carries no tensor data, so a client that sends it again and again (perf_analyzer with
`--shared-memory`) sends the same bytes every time, and decoding them (a JSON body over HTTP, a
ModelInferRequest's fields over gRPC) costs more than the rest of its way to the model. The general
decoder's request for those bytes is kept as a template, and each later request with the same bytes gets
a fresh copy of it. Nothing is skipped but the parsing: the copy is admitted and checked like any request,
its inputs read from the regions it names when it is admitted.

Soundness: the same bytes parse to the same request. Only requests the general decoder accepted are kept,
and only plain ones: no request controls, every input in shared memory with nothing but its region
parameters, so that a copy of each tensor, output and parameter dict is the whole request.
"""

from __future__ import annotations

import numpy as np

from nereid.types import InferRequest, InferTensor, RequestedOutput

MAX_TEMPLATES = 256  # past that the table starts again
MAX_MESSAGE = 4096  # bytes: a request naming its regions is small; larger messages are not looked up
_REGION_PARAMETERS = frozenset(("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"))


# A message's bytes, and what else its request is decoded from (over HTTP, the model and version in the
# URL; over gRPC, nothing: the message names them)
Key = tuple[bytes, str, str]


class SharedMemoryRequests:
    """Templates of recent requests in shared memory, by their message's bytes."""

    __slots__ = ("_templates",)

    def __init__(self) -> None:
        self._templates: dict[Key, InferRequest] = {}

    def get(self, message: bytes, model_name: str = "", model_version: str = "") -> InferRequest | None:
        """A fresh request for `message` when one with these bytes was decoded before; else None."""
        if len(message) > MAX_MESSAGE:
            return None
        template = self._templates.get((message, model_name, model_version))
        return None if template is None else _copy(template)

    def learn(
        self, request: InferRequest, message: bytes, model_name: str = "", model_version: str = ""
    ) -> None:
        """Keep what the general decoder made of `message` (before anything else touched it), when it is
        a plain request in shared memory."""
        if len(message) > MAX_MESSAGE or not _in_shared_memory(request):
            return
        templates = self._templates
        if len(templates) >= MAX_TEMPLATES:
            templates.clear()
        templates[(message, model_name, model_version)] = _copy(request)


def _in_shared_memory(request: InferRequest) -> bool:
    if (
        not request.inputs
        or request.sequence_id
        or request.flags
        or request.priority
        or request.timeout_us
        or request.trace is not None
        or request.layout is not None
    ):
        return False
    return all(
        tensor.shared_memory is not None
        and tensor.parameters.keys() <= _REGION_PARAMETERS
        and isinstance(tensor.data, np.ndarray)
        and tensor.data.size == 0
        for tensor in request.inputs
    )


def _copy(template: InferRequest) -> InferRequest:
    inputs = [
        InferTensor(t.name, t.datatype, t.shape, t.data, dict(t.parameters), t.shared_memory)
        for t in template.inputs
    ]
    outputs = None
    if template.outputs is not None:
        outputs = [
            RequestedOutput(o.name, o.binary, o.class_count, dict(o.parameters), o.shared_memory)
            for o in template.outputs
        ]
    return InferRequest(
        template.model_name, template.model_version, inputs, outputs, template.id, dict(template.parameters)
    )
