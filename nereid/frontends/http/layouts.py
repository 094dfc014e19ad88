"""Decoding the common binary infer request from the JSON header it shares with the requests before it.

A load generator or a client sends the same request again and again with new tensor data: with Triton's
binary tensor data extension the JSON header (inputs with their names, datatypes, shapes and byte sizes,
the outputs asked for) is then the same bytes every time, and only the binary data after it changes.
Parsing and checking that JSON costs more than the rest of decoding; here it is done once per *layout*:
the header's bytes.

Soundness: a layout is kept only from a request the general decoder accepted, and only when that request
is plain: no request parameters but `binary_data_output`, no request controls, every input binary data of
a fixed-size datatype whose byte size is its shape's, and outputs that ask for nothing but `binary_data`.
The same header bytes parse to the same document, so another request with them decodes the same way as
long as its binary data has the same total size (checked; anything else takes the general decoder, which
words the error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nereid.types import InferRequest, InferTensor, InputLayout, RequestedOutput

# Layouts kept at most; past that the table starts again (headers that differ in their ids, say).
MAX_LAYOUTS = 256
_REQUEST_PARAMETERS = frozenset(("binary_data_output",))
_OUTPUT_PARAMETERS = frozenset(("binary_data",))


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: model versions keep the checked ones
class Layout:
    """Everything of a request but its binary data, checked once."""

    id: str
    binary_data_output: bool | None  # the request's parameter, when it sets it
    inputs: tuple[InputLayout, ...]
    outputs: tuple[tuple[str, bool | None], ...] | None  # (name, binary_data) of each asked for
    data_size: int

    def request(self, body: bytes, start: int, model_name: str, model_version: str) -> InferRequest | None:
        """The request whose binary data starts at `start` in `body`; None when the data has not the
        layout's size."""
        if len(body) - start != self.data_size:
            return None
        inputs = []
        offset = start
        for spec in self.inputs:
            array = np.ndarray(spec.shape, spec.dtype, body, offset)  # read-only: `body` is bytes
            inputs.append(
                InferTensor(spec.name, spec.datatype, spec.shape, array, {"binary_data_size": spec.byte_size})
            )
            offset += spec.byte_size
        outputs = None
        if self.outputs is not None:
            outputs = [
                RequestedOutput(name, binary, 0, {} if binary is None else {"binary_data": binary}, None)
                for name, binary in self.outputs
            ]
        parameters = (
            {} if self.binary_data_output is None else {"binary_data_output": self.binary_data_output}
        )
        return InferRequest(model_name, model_version, inputs, outputs, self.id, parameters, layout=self)


def layout_of(request: InferRequest, body: bytes, data_size: int) -> Layout | None:
    """The layout of a request the general decoder gave from `body`, when it is one this module serves:
    each input an array over `body` itself, as that decoder makes the common case."""
    if (
        request.parameters.keys() - _REQUEST_PARAMETERS
        or request.sequence_id
        or request.flags
        or request.priority
        or request.timeout_us
    ):
        return None
    inputs = []
    total = 0
    for tensor in request.inputs:
        size = tensor.parameters.get("binary_data_size")
        data = tensor.data
        if (
            tensor.shared_memory is not None
            or tensor.parameters.keys() != {"binary_data_size"}
            or not isinstance(data, np.ndarray)
            or data.base is not body
            or data.dtype == object
            or data.nbytes != size
        ):
            return None
        inputs.append(InputLayout(tensor.name, tensor.datatype, tensor.shape, data.dtype, size))
        total += size
    if total != data_size:
        return None
    outputs = None
    if request.outputs is not None:
        chosen = []
        for output in request.outputs:
            if (
                output.class_count
                or output.shared_memory is not None
                or output.parameters.keys() - _OUTPUT_PARAMETERS
            ):
                return None
            chosen.append((output.name, output.binary))
        outputs = tuple(chosen)
    return Layout(request.id, request.parameters.get("binary_data_output"), tuple(inputs), outputs, total)


class LayoutCache:
    """Layouts of recent requests, by their JSON header's bytes (None: a header this module leaves to the
    general decoder)."""

    __slots__ = ("_layouts",)

    def __init__(self) -> None:
        self._layouts: dict[bytes, Layout | None] = {}

    def get(self, header: bytes) -> Layout | None:
        return self._layouts.get(header)

    def known(self, header: bytes) -> bool:
        return header in self._layouts

    def remember(self, header: bytes, request: InferRequest, body: bytes, data_size: int) -> None:
        layouts = self._layouts
        if len(layouts) >= MAX_LAYOUTS:
            layouts.clear()
        layouts[header] = layout_of(request, body, data_size)
