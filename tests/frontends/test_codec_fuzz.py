"""Property-based (hypothesis) tests of the HTTP codec, BYTES (de)serialization and compression.

The contract under test: whatever a client sends, the decoders either return a value or raise a
`NereidError` subclass (which the frontend maps to an HTTP status): never any other exception. And
what tritonclient encodes, Nereid decodes to the same arrays; what Nereid encodes, tritonclient
decodes to the same arrays.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nereid.datatypes import WIRE_DATATYPES, deserialize_bytes, numpy_dtype, serialize_bytes
from nereid.errors import InvalidArgument, NereidError
from nereid.frontends.http.codec import (
    decode_infer_request,
    decode_raw_binary_request,
    encode_infer_response,
)
from nereid.frontends.http.compression import choose_encoding, decompress
from nereid.types import InferRequest, InferResponse, InferTensor, RequestedOutput

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROUND_TRIP = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DATATYPES = sorted(WIRE_DATATYPES)
NUMERIC = [d for d in DATATYPES if d != "BYTES"]
JSON_DATATYPES = [d for d in DATATYPES if d not in ("FP16", "BF16")]


def _decode_or_nereid_error(body: bytes, header_length: int | None) -> None:
    try:
        request = decode_infer_request(body, header_length, "model", "")
    except NereidError:
        return
    assert isinstance(request, InferRequest)
    for tensor in request.inputs:
        assert isinstance(tensor.data, np.ndarray)
        assert tensor.data.shape == tensor.shape


# ---------------------------------------------------------------------------------------------
# 1. decode_infer_request never raises anything but NereidError
# ---------------------------------------------------------------------------------------------


@FUZZ
@given(body=st.binary(max_size=256), data=st.data())
def test_decode_arbitrary_bytes(body: bytes, data: st.DataObject) -> None:
    header_length = data.draw(
        st.one_of(
            st.none(),
            st.integers(min_value=-4, max_value=len(body) + 4),
            st.sampled_from([-(2**63), -1, 0, len(body), len(body) + 1, 2**31, 2**63, 2**80]),
        ),
        label="header_length",
    )
    _decode_or_nereid_error(body, header_length)


# JSON values of every kind, including ones that break 64-bit and float assumptions
_HUGE_INTS = st.sampled_from(
    [
        2**31,
        2**32,
        2**53 + 1,
        2**62,
        2**63 - 1,
        2**63,
        2**64 - 1,
        2**64,
        2**100,
        -(2**63),
        -(2**63) - 1,
        -(2**100),
    ]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-300, max_value=300),
    _HUGE_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=4), children, max_size=3),
    ),
    max_leaves=12,
)
_DIM = st.one_of(
    st.integers(min_value=0, max_value=4),
    st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1]),  # valid int64, but no array that big exists
    st.sampled_from([-1, -(2**63), 2**63, 2**64]),  # invalid
)
_JUNK_SHAPES = st.one_of(
    st.lists(_DIM, min_size=1, max_size=4),
    st.lists(st.just(1), min_size=60, max_size=70),  # beyond numpy's maximum number of dimensions
    _JSON,
)
_JUNK_DATATYPES = st.one_of(st.sampled_from(["", "fp32", "FP8", "STRING", "TYPE_FP32", "BF16 "]), _JSON)
_BINARY_DATA_SIZE = st.one_of(
    st.integers(min_value=-5, max_value=40),
    _HUGE_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    _JSON,
)
_PARAMETERS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "binary_data_size": _BINARY_DATA_SIZE,
            "shared_memory_region": _JSON,
            "binary_data": st.one_of(st.booleans(), _JSON),
            "classification": st.one_of(st.integers(min_value=-2, max_value=5), _JSON),
            "x": _JSON,
        },
    ),
    _JSON,
)


def _percent(draw: st.DrawFn, p: int) -> bool:
    """True about p% of the time (st.one_of weighs its branches evenly, which starves the valid ones)."""
    return draw(st.integers(min_value=0, max_value=99)) < p


def _flat_data(datatype: Any, count: int) -> st.SearchStrategy[Any]:
    """Well-formed-looking JSON data for a datatype (possibly the wrong kind of values)."""
    if datatype == "BOOL":
        element: st.SearchStrategy[Any] = st.booleans()
    elif datatype == "BYTES":
        element = st.text(max_size=4)
    elif isinstance(datatype, str) and datatype.startswith(("INT", "UINT")):
        element = st.one_of(st.integers(min_value=-(2**8), max_value=2**8), _HUGE_INTS)
    else:
        element = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 5))
    return st.lists(element, min_size=count, max_size=count)


@st.composite
def _input_entry(draw: st.DrawFn) -> tuple[Any, bytes]:
    """One element of 'inputs' (mostly plausible, with invalid fields mixed in) and its binary bytes."""
    if _percent(draw, 5):
        return draw(_JSON), b""
    entry: dict[str, Any] = {}
    if _percent(draw, 95):
        entry["name"] = draw(st.sampled_from(["INPUT0", "x", ""])) if _percent(draw, 85) else draw(_JSON)
    if _percent(draw, 95):
        entry["datatype"] = draw(st.sampled_from(DATATYPES)) if _percent(draw, 80) else draw(_JUNK_DATATYPES)
    if _percent(draw, 95):
        if _percent(draw, 50):
            entry["shape"] = draw(st.lists(st.integers(min_value=0, max_value=3), max_size=3))
        else:
            entry["shape"] = draw(_JUNK_SHAPES)
    shape = entry.get("shape")
    datatype = entry.get("datatype")
    datatype = datatype if isinstance(datatype, str) else None
    count = -1
    if isinstance(shape, list) and all(type(d) is int for d in shape):
        count = math.prod(shape)
    tail = b""
    if _percent(draw, 50):  # JSON data
        if _percent(draw, 95):
            if 0 <= count <= 8 and _percent(draw, 60):
                data = draw(_flat_data(datatype, count))
                if count and _percent(draw, 50) and 1 < len(shape) <= 32 and min(shape) >= 0:
                    data = np.array(data, dtype=object).reshape(shape).tolist()  # nested as the shape
            elif count == 0 or (count > 8 and _percent(draw, 50)):
                data = draw(st.sampled_from([[], [[]], [1], ["a"]]))
            else:
                data = draw(_JSON)
            entry["data"] = data
        if _percent(draw, 25):
            entry["parameters"] = draw(_PARAMETERS)
        return entry, tail
    # binary data
    if datatype in WIRE_DATATYPES and 0 <= count <= 16 and _percent(draw, 60):
        if datatype == "BYTES":
            elements = draw(st.lists(st.binary(max_size=5), min_size=count, max_size=count))
            tail = serialize_bytes(_object_array(elements))
        else:
            size = count * numpy_dtype(datatype).itemsize
            tail = draw(st.binary(min_size=size, max_size=size))
    elif _percent(draw, 50):
        tail = draw(st.binary(max_size=24))
    binary_data_size: Any = len(tail) if _percent(draw, 80) else draw(_BINARY_DATA_SIZE)
    parameters = draw(st.dictionaries(st.text(max_size=3), _JSON, max_size=2)) if _percent(draw, 20) else {}
    parameters["binary_data_size"] = binary_data_size
    entry["parameters"] = parameters
    if _percent(draw, 5):
        entry["data"] = draw(_JSON)
    return entry, tail


_OUTPUTS = st.one_of(
    st.none(),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"name": st.text(max_size=4)}, optional={"parameters": _PARAMETERS}),
            _JSON,
        ),
        max_size=3,
    ),
    _JSON,
)


@st.composite
def _structured_request(draw: st.DrawFn) -> tuple[bytes, int | None]:
    if _percent(draw, 3):
        document: Any = draw(_JSON)
        entries: list[tuple[Any, bytes]] = []
    else:
        entries = draw(st.lists(_input_entry(), max_size=4))
        document = {"inputs": [entry for entry, _ in entries] if _percent(draw, 95) else draw(_JSON)}
        if _percent(draw, 30):
            document["outputs"] = draw(_OUTPUTS)
        if _percent(draw, 15):
            document["id"] = draw(st.one_of(st.text(max_size=4), _JSON))
        if _percent(draw, 15):
            document["parameters"] = draw(st.one_of(st.just({"binary_data_output": True}), _JSON))
    # the standard library writes integers of any size (orjson refuses beyond 64 bits)
    header = json.dumps(document).encode()
    tail = b"".join(t for _, t in entries)
    if _percent(draw, 10):
        tail = draw(st.binary(max_size=32))
    header_length: int | None = len(header)
    if _percent(draw, 10):
        header_length = draw(st.one_of(st.none(), st.integers(-2, len(header) + len(tail) + 2)))
    elif not tail and _percent(draw, 50):
        header_length = None
    return header + tail, header_length


@FUZZ
@given(request=_structured_request())
def test_decode_structured_but_wrong_json(request: tuple[bytes, int | None]) -> None:
    body, header_length = request
    _decode_or_nereid_error(body, header_length)


# The header-less form: the body is client data, datatype and shape come from the model config.
@FUZZ
@given(
    body=st.binary(max_size=64),
    datatype=st.sampled_from(DATATYPES),
    shape=st.lists(st.integers(min_value=0, max_value=5), max_size=4),
)
def test_decode_raw_binary_request(body: bytes, datatype: str, shape: list[int]) -> None:
    try:
        request = decode_raw_binary_request(body, "model", "", "INPUT0", datatype, tuple(shape))
    except NereidError:
        return
    assert request.inputs[0].data.shape == tuple(shape)


# Minimal inputs found by the fuzz tests above, kept as plain regression tests.
_REPRODUCERS = {
    "bytes-binary-count-too-big-to-allocate": (
        {
            "inputs": [
                {"name": "a", "datatype": "BYTES", "shape": [2**40], "parameters": {"binary_data_size": 0}}
            ]
        },
        b"",
    ),
    "bytes-binary-count-overflows-intp": (
        {
            "inputs": [
                {
                    "name": "a",
                    "datatype": "BYTES",
                    "shape": [2**31, 2**31],
                    "parameters": {"binary_data_size": 0},
                }
            ]
        },
        b"",
    ),
    "binary-zero-size-huge-dim": (
        {
            "inputs": [
                {
                    "name": "a",
                    "datatype": "FP32",
                    "shape": [0, 2**63 - 1],
                    "parameters": {"binary_data_size": 0},
                }
            ]
        },
        b"",
    ),
    "json-empty-data-huge-dims": (
        {"inputs": [{"name": "a", "datatype": "FP32", "shape": [0, 2**62, 2**62], "data": []}]},
        b"",
    ),
    "json-bytes-empty-data-huge-dims": (
        {"inputs": [{"name": "a", "datatype": "BYTES", "shape": [0, 2**62, 2**62], "data": []}]},
        b"",
    ),
    "json-more-than-64-dims": (
        {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1] * 65, "data": [1.0]}]},
        b"",
    ),
    "binary-more-than-64-dims": (
        {
            "inputs": [
                {"name": "a", "datatype": "FP32", "shape": [1] * 65, "parameters": {"binary_data_size": 4}}
            ]
        },
        b"\0\0\0\0",
    ),
}


@pytest.mark.parametrize("case", sorted(_REPRODUCERS))
def test_known_hostile_requests_raise_nereid_error(case: str) -> None:
    document, tail = _REPRODUCERS[case]
    header = json.dumps(document).encode()
    with pytest.raises(NereidError):
        decode_infer_request(header + tail, len(header), "model", "")


# ---------------------------------------------------------------------------------------------
# 2. Round trip of what tritonclient sends
# ---------------------------------------------------------------------------------------------

_SMALL_SHAPES = st.lists(st.integers(min_value=0, max_value=3), max_size=3).map(tuple)
_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6)


def _object_array(items: list[bytes], shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.empty(len(items), dtype=np.object_)
    for i, item in enumerate(items):
        array[i] = item
    return array.reshape(shape if shape is not None else (len(items),))


@st.composite
def _tensor(draw: st.DrawFn, datatype: str, json_safe: bool) -> np.ndarray:
    """A valid tensor of `datatype`; with `json_safe`, finite floats and UTF-8 BYTES only."""
    shape = draw(_SMALL_SHAPES)
    count = math.prod(shape)
    if datatype == "BYTES":
        element = _TEXT.map(lambda s: s.encode("utf-8")) if json_safe else st.binary(max_size=8)
        return _object_array(draw(st.lists(element, min_size=count, max_size=count)), shape)
    dtype = numpy_dtype(datatype)
    if datatype == "BF16":
        values = draw(
            hnp.arrays(
                np.float32,
                shape,
                elements=st.floats(width=32, allow_nan=not json_safe, allow_infinity=not json_safe),
            )
        )
        converted = values.astype(dtype)
        if json_safe:  # a finite float32 near the top of the range rounds to infinity in bfloat16
            converted[~np.isfinite(converted.astype(np.float32))] = 0
        return converted
    if dtype.kind == "f":
        elements = st.floats(width=dtype.itemsize * 8, allow_nan=not json_safe, allow_infinity=not json_safe)
        return draw(hnp.arrays(dtype, shape, elements=elements))
    return draw(hnp.arrays(dtype, shape))


def _assert_same(decoded: np.ndarray, original: np.ndarray, datatype: str) -> None:
    assert decoded.shape == original.shape
    if datatype == "BYTES":
        assert decoded.dtype == np.object_
        assert [bytes(x) for x in decoded.reshape(-1)] == list(original.reshape(-1))
        return
    assert decoded.dtype == original.dtype
    # bitwise: NaN payloads, -0.0 and all
    assert np.ascontiguousarray(decoded).tobytes() == np.ascontiguousarray(original).tobytes()


@st.composite
def _client_inputs(draw: st.DrawFn, binary: bool | None) -> list[tuple[str, np.ndarray, bool]]:
    """(datatype, array, as binary) per input; `binary` None mixes the two forms."""
    result = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        as_binary = draw(st.booleans()) if binary is None else binary
        datatype = draw(st.sampled_from(DATATYPES if as_binary else JSON_DATATYPES))
        result.append((datatype, draw(_tensor(datatype, json_safe=not as_binary)), as_binary))
    return result


def _check_client_round_trip(specs: list[tuple[str, np.ndarray, bool]]) -> None:
    inputs = []
    for i, (datatype, array, as_binary) in enumerate(specs):
        infer_input = httpclient.InferInput(f"INPUT{i}", list(array.shape), datatype)
        infer_input.set_data_from_numpy(array, binary_data=as_binary)
        inputs.append(infer_input)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(inputs)
    assert (header_length is None) == (not any(as_binary for _, _, as_binary in specs))
    request = decode_infer_request(body, header_length, "model", "")
    assert [t.name for t in request.inputs] == [f"INPUT{i}" for i in range(len(specs))]
    for tensor, (datatype, array, _) in zip(request.inputs, specs, strict=True):
        assert tensor.datatype == datatype
        assert tensor.shape == array.shape
        _assert_same(tensor.data, array, datatype)


@ROUND_TRIP
@given(specs=_client_inputs(binary=False))
def test_tritonclient_json_round_trip(specs: list[tuple[str, np.ndarray, bool]]) -> None:
    _check_client_round_trip(specs)


@ROUND_TRIP
@given(specs=_client_inputs(binary=True))
def test_tritonclient_binary_round_trip(specs: list[tuple[str, np.ndarray, bool]]) -> None:
    _check_client_round_trip(specs)


@ROUND_TRIP
@given(specs=_client_inputs(binary=None))
def test_tritonclient_mixed_round_trip(specs: list[tuple[str, np.ndarray, bool]]) -> None:
    _check_client_round_trip(specs)


def test_known_json_uint64_above_int64_max_round_trips() -> None:
    """Found by the round trip above: numpy reads [2**63, 0] as float64, so the codec refused it."""
    _check_client_round_trip([("UINT64", np.array([2**63, 0], dtype=np.uint64), False)])


# ---------------------------------------------------------------------------------------------
# 3. BYTES (de)serialization
# ---------------------------------------------------------------------------------------------


@FUZZ
@given(buffer=st.binary(max_size=64), count=st.integers(min_value=0, max_value=10))
def test_deserialize_bytes_random(buffer: bytes, count: int) -> None:
    try:
        out = deserialize_bytes(buffer, count, "t")
    except NereidError:
        return
    assert out.shape == (count,) and out.dtype == np.object_
    assert all(isinstance(x, bytes) for x in out)
    # the encoding is a bijection: what decodes re-encodes to the same buffer
    assert serialize_bytes(out) == buffer


@FUZZ
@given(items=st.lists(st.binary(max_size=40), max_size=10))
def test_bytes_round_trip(items: list[bytes]) -> None:
    array = _object_array(items)
    buffer = serialize_bytes(array)
    out = deserialize_bytes(buffer, len(items), "t")
    assert list(out) == items
    assert deserialize_bytes(memoryview(buffer), len(items), "t").tolist() == items


# ---------------------------------------------------------------------------------------------
# 4. decompress
# ---------------------------------------------------------------------------------------------

_ENCODINGS = st.one_of(
    st.sampled_from(["gzip", "deflate", "identity", "", " GZIP ", "Deflate", "br", "x-gzip", "compress"]),
    st.text(max_size=8),
)


@st.composite
def _maybe_compressed(draw: st.DrawFn) -> bytes:
    """Random bytes, or valid/truncated/corrupted gzip and zlib streams."""
    kind = draw(st.sampled_from(["random", "gzip", "deflate"]))
    if kind == "random":
        return draw(st.binary(max_size=128))
    payload = draw(st.binary(max_size=128))
    stream = gzip.compress(payload) if kind == "gzip" else zlib.compress(payload)
    cut = draw(st.integers(min_value=0, max_value=len(stream)))
    stream = stream[:cut] if draw(st.booleans()) else stream
    if stream and draw(st.booleans()):
        i = draw(st.integers(min_value=0, max_value=len(stream) - 1))
        stream = stream[:i] + bytes([stream[i] ^ draw(st.integers(1, 255))]) + stream[i + 1 :]
    return stream + draw(st.binary(max_size=4))


@FUZZ
@given(body=_maybe_compressed(), encoding=_ENCODINGS, limit=st.integers(min_value=0, max_value=64))
def test_decompress_random(body: bytes, encoding: str, limit: int) -> None:
    try:
        out = decompress(body, encoding, limit)
    except NereidError:
        return
    assert isinstance(out, bytes)
    if encoding.strip().lower() in ("", "identity"):
        assert out == body
    else:
        assert len(out) <= limit


@FUZZ
@given(
    data=st.binary(max_size=512),
    slack=st.integers(min_value=0, max_value=64),
    encoding=st.sampled_from(["gzip", "deflate"]),
)
def test_decompress_round_trip_under_limit(data: bytes, slack: int, encoding: str) -> None:
    body = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    assert decompress(body, encoding, len(data) + slack) == data


@FUZZ
@given(
    data=st.binary(min_size=1, max_size=512), st_data=st.data(), encoding=st.sampled_from(["gzip", "deflate"])
)
def test_decompress_over_limit_raises(data: bytes, st_data: st.DataObject, encoding: str) -> None:
    limit = st_data.draw(st.integers(min_value=0, max_value=len(data) - 1), label="limit")
    body = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    with pytest.raises(InvalidArgument):
        decompress(body, encoding, limit)


def test_decompress_bomb_is_refused_cheaply() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))
    with pytest.raises(InvalidArgument):
        decompress(bomb, "gzip", 1024)


# ---------------------------------------------------------------------------------------------
# 5. choose_encoding
# ---------------------------------------------------------------------------------------------

_TOKEN = st.one_of(
    st.sampled_from(["gzip", "deflate", "identity", "GZIP", " deflate ", "*", "br", "", ";", "q=1"]),
    st.text(max_size=6),
)
_QVALUE = st.one_of(
    st.none(),
    st.floats().map(lambda q: f"q={q}"),
    st.sampled_from(["q=", "q=abc", "q=1e999", "q=nan", "q=-inf", "q=0", "Q=1", "q =0.5", "level=1"]),
    st.text(max_size=5),
)
_ACCEPT = st.one_of(
    st.text(max_size=40),
    st.lists(st.tuples(_TOKEN, _QVALUE), max_size=5).map(
        lambda parts: ",".join(t if q is None else f"{t};{q}" for t, q in parts)
    ),
)


@FUZZ
@given(header=_ACCEPT)
def test_choose_encoding_never_raises(header: str) -> None:
    assert choose_encoding(header) in ("identity", "gzip", "deflate")


# ---------------------------------------------------------------------------------------------
# 6. encode_infer_response, decoded by tritonclient
# ---------------------------------------------------------------------------------------------

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # Triton's int64 parameters


@st.composite
def _response(draw: st.DrawFn) -> tuple[InferResponse, InferRequest, dict[str, bool | None]]:
    """A response, the request it answers and, per output, whether it must be binary (None: either)."""
    n = draw(st.integers(min_value=1, max_value=4))
    names = draw(st.lists(st.text(min_size=1, max_size=5), min_size=n, max_size=n, unique=True))
    list_outputs = draw(st.booleans())  # else: no 'outputs', "binary_data_output": true
    choices: list[bool | None] = [
        draw(st.sampled_from([None, True, False])) if list_outputs else True for _ in names
    ]
    if True not in choices:  # the property is about responses with binary outputs
        choices[draw(st.integers(min_value=0, max_value=n - 1))] = True
    outputs = []
    for name, choice in zip(names, choices, strict=True):
        datatype = draw(st.sampled_from(DATATYPES))  # the encoder writes FP16/BF16 JSON as float32
        array = draw(_tensor(datatype, json_safe=choice is not True))
        outputs.append(InferTensor(name, datatype, array.shape, array))
    response = InferResponse(
        "model",
        draw(st.sampled_from(["", "1"])),
        outputs,
        draw(st.one_of(st.just(""), st.text(max_size=5))),
        draw(st.one_of(st.just({}), st.dictionaries(st.text(max_size=4), _INT64, max_size=2))),
    )
    if list_outputs:
        requested = [RequestedOutput(name, choice) for name, choice in zip(names, choices, strict=True)]
        parameters = {"binary_data_output": True} if draw(st.booleans()) else {}
        request = InferRequest("model", "", [], requested, "", parameters)
    else:
        request = InferRequest("model", "", [], None, "", {"binary_data_output": True})
    return response, request, dict(zip(names, choices, strict=True))


@ROUND_TRIP
@given(case=_response())
def test_encode_response_decoded_by_tritonclient(
    case: tuple[InferResponse, InferRequest, dict[str, bool | None]],
) -> None:
    response, request, must_be_binary = case
    body, header_length = encode_infer_response(response, request)
    assert header_length is not None
    assert 0 < header_length <= len(body)
    header = orjson.loads(body[:header_length])
    assert header["model_name"] == "model"
    entries = {o["name"]: o for o in header["outputs"]}
    assert list(entries) == [t.name for t in response.outputs]
    sizes = [o.get("parameters", {}).get("binary_data_size", 0) for o in header["outputs"]]
    assert sum(sizes) == len(body) - header_length

    result = httpclient.InferResult.from_response_body(body, header_length=header_length)
    assert result.get_response()["model_version"] == response.model_version
    for tensor in response.outputs:
        entry = entries[tensor.name]
        is_binary = "binary_data_size" in entry.get("parameters", {})
        assert is_binary != ("data" in entry)
        if must_be_binary[tensor.name] is not None:
            assert is_binary == must_be_binary[tensor.name]
        decoded = result.as_numpy(tensor.name)
        assert decoded is not None
        assert decoded.shape == tensor.data.shape
        if is_binary:
            _assert_same(decoded, tensor.data, tensor.datatype)
        elif tensor.datatype == "BYTES":  # JSON strings come back as str
            assert [str(x) for x in decoded.reshape(-1)] == [
                x.decode("utf-8") for x in tensor.data.reshape(-1)
            ]
        else:
            assert decoded.dtype == tensor.data.dtype
            assert np.array_equal(decoded, tensor.data)
