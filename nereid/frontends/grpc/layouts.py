"""Decoding the common ModelInferRequest from what it shares with the requests before it, and writing
the common ModelInferResponse likewise.

A load generator or a client sends the same request again and again with new tensor data: the same model,
inputs (names, datatypes, shapes), outputs and parameters, and only `raw_input_contents` changing. Reading
those fields through protobuf's wrappers costs more than the rest of decoding; here they are read once per
*layout*: the bytes of the message before its raw contents. Serializers write fields in the order of their
numbers, and raw_input_contents has the last one, so those bytes are the message less the raw contents'
own (encoded) size.

Soundness: the prefix is trusted only when it parses as a whole message with no raw contents. A prefix
that ends inside a field fails to parse, so it ends on a field boundary; every raw content then lies in the
rest, whose size is exactly theirs, so the rest holds nothing else and the prefix alone carries every other
field of the request. Layouts that need more than views on raw bytes (request controls such as
`sequence_id`, tensor parameters, shared memory, typed contents, BYTES, anything Triton refuses) are not
kept: such requests take `decode_infer_request`, which checks and words everything. Plain request
parameters are kept, decoded once: perf_analyzer sets `triton_enable_empty_final_response` on every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from nereid.datatypes import WIRE_DATATYPES, numpy_dtype, tensor_to_bytes
from nereid.errors import NereidError
from nereid.frontends.grpc.codec import (
    RESERVED_PARAMETERS,
    check_shape,
    decode_infer_request,
    decode_request_parameters,
    encode_infer_response,
)
from nereid.shared_memory_requests import SharedMemoryRequests
from nereid.types import InferRequest, InferResponse, InferTensor, InputLayout, Parameters, RequestedOutput

# Layouts kept at most; past that the table starts again (requests that differ in their ids, say).
MAX_LAYOUTS = 256
# The wire datatypes whose raw contents are a plain array, and their numpy types.
_ARRAY_DTYPES = {datatype: numpy_dtype(datatype) for datatype in WIRE_DATATYPES if datatype != "BYTES"}
_RAW_INPUT_TAG = b"\x3a"  # raw_input_contents: field 7, length-delimited
_RAW_TAG_SIZE = len(_RAW_INPUT_TAG)


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: model versions keep the checked ones
class Layout:
    """Everything of a request but its raw contents, checked once."""

    model_name: str
    model_version: str
    id: str
    inputs: tuple[InputLayout, ...]
    # the outputs asked for, shared by the layout's requests as a model's `all_outputs` are by others
    outputs: tuple[RequestedOutput, ...] | None
    parameters: Parameters  # plain ones only; each request gets its own copy
    # each input with its raw contents field's tag and size, as a serializer writes them; those fields' size
    raw_inputs: tuple[tuple[bytes, InputLayout], ...]
    raw_size: int

    def parsed(self, payload: bytes) -> InferRequest | None:
        """The request whose last `raw_size` bytes are its raw contents' fields, one an input with its
        input's size, as a serializer writes them; else None."""
        inputs = []
        at = len(payload) - self.raw_size
        for head, spec in self.raw_inputs:
            data = at + len(head)
            if payload[at:data] != head:
                return None
            at = data + spec.byte_size
            array = np.ndarray(spec.shape, spec.dtype, payload[data:at])  # read-only, as frombuffer gives
            inputs.append(InferTensor(spec.name, spec.datatype, spec.shape, array, {}))
        return self._request(inputs)

    def request(self, contents: list[bytes]) -> InferRequest | None:
        """The request with these raw contents; None when one has not its input's size (the general
        decoder words that)."""
        if len(contents) != len(self.inputs):
            return None
        inputs = []
        for spec, data in zip(self.inputs, contents, strict=True):
            if len(data) != spec.byte_size:
                return None
            array = np.ndarray(spec.shape, spec.dtype, data)
            inputs.append(InferTensor(spec.name, spec.datatype, spec.shape, array, {}))
        return self._request(inputs)

    def _request(self, inputs: list[InferTensor]) -> InferRequest:
        """The request with these inputs, each as its layout says."""
        outputs = None if self.outputs is None else list(self.outputs)
        parameters = self.parameters.copy() if self.parameters else {}
        return InferRequest(
            self.model_name, self.model_version, inputs, outputs, self.id, parameters, layout=self
        )


def _varint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _layout(prefix: bytes, raw_count: int) -> Layout | None:
    """The layout of a prefix, or None where it is not one this module serves."""
    try:
        message = pb.ModelInferRequest.FromString(prefix)
    except DecodeError:
        return None
    if message.raw_input_contents or len(message.inputs) != raw_count:
        return None
    parameters: Parameters = {}
    if message.parameters:
        if any(key in RESERVED_PARAMETERS for key in message.parameters):
            return None
        try:
            parameters = decode_request_parameters(message.parameters)
        except NereidError:
            return None
    inputs = []
    for tensor in message.inputs:
        dtype = _ARRAY_DTYPES.get(tensor.datatype)
        if dtype is None or tensor.parameters or tensor.HasField("contents"):
            return None
        shape = tuple(tensor.shape)
        try:
            count = check_shape(shape, tensor.name)
        except NereidError:
            return None
        inputs.append(InputLayout(tensor.name, tensor.datatype, shape, dtype, count * dtype.itemsize))
    outputs = None
    if message.outputs:
        if any(output.parameters for output in message.outputs):
            return None
        outputs = tuple(RequestedOutput(output.name) for output in message.outputs)
    raw_inputs = tuple((_RAW_INPUT_TAG + _varint(spec.byte_size), spec) for spec in inputs)
    raw_size = sum(len(head) + spec.byte_size for head, spec in raw_inputs)
    return Layout(
        message.model_name,
        message.model_version,
        message.id,
        tuple(inputs),
        outputs,
        parameters,
        raw_inputs,
        raw_size,
    )


class LayoutCache:
    """Layouts of recent requests, by the bytes before their raw contents; and requests whose tensors are
    all in shared memory, by their bytes (see nereid.shared_memory_requests)."""

    def __init__(self) -> None:
        self._layouts: dict[bytes, Layout | None] = {}
        self._raw_sizes: dict[int, int] = {}  # a request's size: the raw contents' of a layout that size
        # the size, prefix and layout of the last request served by `known`: the next is usually laid out
        # the same, which its bytes say without a copy and a hash of its prefix
        self._last: tuple[int, bytes, Layout] | None = None
        self._shared_memory = SharedMemoryRequests()  # requests with no raw contents, all in regions

    def known(self, payload: bytes) -> InferRequest | None:
        """The request in `payload` when it is laid out as a layout seen before (not parsed); else None."""
        size = len(payload)
        last = self._last
        if last is not None and last[0] == size and payload.startswith(last[1]):
            return last[2].parsed(payload)
        raw_size = self._raw_sizes.get(size)
        if raw_size is None:  # no raw contents of a layout's size: perhaps every tensor in shared memory
            return self._shared_memory.get(payload)
        prefix = payload[: size - raw_size]
        layout = self._layouts.get(prefix)
        if layout is None or layout.raw_size != raw_size:
            return None
        self._last = (size, prefix, layout)
        return layout.parsed(payload)

    def decode(self, message: pb.ModelInferRequest, payload: bytes) -> InferRequest:
        """What `decode_infer_request(message)` gives, `payload` being the message's bytes."""
        contents = list(message.raw_input_contents)
        if contents:
            size = 0
            for data in contents:
                size += _RAW_TAG_SIZE + _varint_size(len(data)) + len(data)
            prefix = payload[: len(payload) - size]
            layouts = self._layouts
            try:
                layout = layouts[prefix]
            except KeyError:
                if len(layouts) >= MAX_LAYOUTS:
                    layouts.clear()
                    self._raw_sizes.clear()
                    self._last = None
                layout = layouts[prefix] = _layout(prefix, len(contents))
            if layout is not None:
                if layout.raw_size == size:  # its next requests of this size: `known`
                    self._raw_sizes[len(payload)] = size
                request = layout.request(contents)
                if request is not None:
                    return request
            return decode_infer_request(message)
        request = decode_infer_request(message)
        self._shared_memory.learn(request, payload)
        return request


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_RAW_OUTPUT_TAG = b"\x32"  # raw_output_contents: field 6, length-delimited
_NDARRAY = np.ndarray
# A response head: the sizes of the raw contents first seen with it, and the message's parts for contents
# of those sizes (the head's bytes, then each content's field tag and size, and its place, None).
_Head = tuple[list[int], list[bytes | None]]


class ResponseLayouts:
    """Serialized ModelInferResponses from the head (every field before raw_output_contents) of earlier
    ones that said the same: the same bytes as protobuf writes, without building the message."""

    def __init__(self) -> None:
        self._heads: dict[tuple[Any, ...], _Head] = {}  # by what the head says

    def serialize(self, response: InferResponse) -> bytes:
        if response.parameters:
            return encode_infer_response(response).SerializeToString()
        key: list[Any] = [response.model_name, response.model_version, response.id]
        contents: list[bytes] = []
        sizes: list[int] = []
        for tensor in response.outputs:
            datatype = tensor.datatype
            key += (tensor.name, datatype, tuple(tensor.shape))
            array = tensor.data
            if tensor.shared_memory is not None:  # written into the client's region: empty contents
                data = b""
            # an array of the wire's own type: its row-major bytes, as tensor_to_bytes gives them
            elif type(array) is _NDARRAY and array.dtype is _ARRAY_DTYPES.get(datatype):
                data = array.tobytes()
            else:
                data = tensor_to_bytes(array, datatype)
            contents.append(data)
            sizes.append(len(data))
        head_key = tuple(key)
        layout = self._heads.get(head_key)
        if layout is None:
            layout = self._learn(head_key, response, sizes)
        known_sizes, template = layout
        # the same head with contents of other sizes (BYTES): their fields anew
        parts = template[:] if sizes == known_sizes else _parts(template[0], sizes)  # type: ignore[arg-type]
        parts[2::2] = contents  # one place per output, by the key
        return b"".join(parts)  # type: ignore[arg-type]  # every place filled

    def _learn(self, key: tuple[Any, ...], response: InferResponse, sizes: list[int]) -> _Head:
        message = encode_infer_response(response)
        message.ClearField("raw_output_contents")
        template = _parts(message.SerializeToString(), sizes)
        heads = self._heads
        if len(heads) >= MAX_LAYOUTS:
            heads.clear()
        layout = heads[key] = (sizes, template)
        return layout


def _parts(head: bytes, sizes: list[int]) -> list[bytes | None]:
    """A response's parts: its head, then each raw content's field tag and size and its place (None)."""
    parts: list[bytes | None] = [head]
    for size in sizes:
        parts += (_RAW_OUTPUT_TAG + _varint(size), None)
    return parts
