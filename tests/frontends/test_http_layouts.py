"""Binary infer requests decoded from the layout of an earlier one (the same JSON header) read exactly as
the general decoder reads them, errors included; headers the layouts do not serve still decode right."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from nereid.errors import NereidError
from nereid.frontends.http import codec
from nereid.frontends.http.layouts import MAX_LAYOUTS, LayoutCache
from tests.frontends.grpc.test_layouts import _read


@pytest.fixture(autouse=True)
def fresh_layouts(monkeypatch: pytest.MonkeyPatch) -> LayoutCache:
    cache = LayoutCache()
    monkeypatch.setattr(codec, "_LAYOUTS", cache)
    return cache


def _input(
    name: str, datatype: str = "FP32", shape: list[int] | None = None, size: int = 64, **more: Any
) -> dict:
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape or [1, 16]}
    entry["parameters"] = {"binary_data_size": size, **more.pop("parameters", {})}
    entry.update(more)
    return entry


def _body(header: dict[str, Any], data: bytes) -> tuple[bytes, int]:
    text = orjson.dumps(header)
    return text + data, len(text)


def _plain(**changes: Any) -> dict[str, Any]:
    header: dict[str, Any] = {"id": "", "inputs": [_input("INPUT0"), _input("INPUT1")]}
    header["outputs"] = [
        {"name": "OUTPUT0", "parameters": {"binary_data": True}},
        {"name": "OUTPUT1", "parameters": {"binary_data": True}},
    ]
    header.update(changes)
    return header


def _outcome(decode: Any, body: bytes, header_length: int) -> Any:
    try:
        request = decode(body, header_length, "add_sub", "1")
        flags = [t.data.flags.writeable for t in request.inputs]
        words = [t.data.tolist() for t in request.inputs if t.data.dtype == object]
        for tensor in request.inputs:  # _read compares bytes, which are pointers in an object array
            if tensor.data.dtype == object:
                tensor.data = np.zeros(0)
        return (_read(request), flags, words)
    except NereidError as exc:
        return (type(exc), exc.message)


def _same(body: bytes, header_length: int) -> Any:
    expected = _outcome(codec._decode, body, header_length)
    assert _outcome(codec.decode_infer_request, body, header_length) == expected
    return expected


_DATA = np.arange(32, dtype=np.float32).tobytes()


def _variants() -> list[tuple[dict[str, Any], bytes]]:
    words = b"\x03\x00\x00\x00abc"
    return [
        (_plain(), _DATA),
        (_plain(id="request-1"), _DATA),
        (_plain(outputs=[{"name": "OUTPUT0"}]), _DATA),
        (_plain(outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}]), _DATA),
        (_plain(outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]), _DATA),
        ({"inputs": [_input("INPUT0"), _input("INPUT1")], "parameters": {"binary_data_output": True}}, _DATA),
        ({"inputs": [_input("INPUT0"), _input("INPUT1")]}, _DATA),
        (_plain(parameters={"sequence_id": 7, "sequence_start": True}), _DATA),
        (_plain(parameters={"priority": 2}), _DATA),
        (_plain(parameters={"custom": "x"}), _DATA),
        (
            _plain(
                inputs=[
                    _input("INPUT0"),
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
                ]
            ),
            _DATA[:64],
        ),
        (_plain(inputs=[_input("INPUT0", parameters={"x": 1}), _input("INPUT1")]), _DATA),
        (_plain(inputs=[_input("W", "BYTES", [1], len(words))]), words),
        (_plain(inputs=[_input("H", "FP16", [1, 16], 32)]), _DATA[:32]),
        (_plain(inputs=[_input("B", "BOOL", [1, 4], 4)]), b"\x01\x00\x01\x01"),
        (
            _plain(inputs=[_input("INPUT0", size=60), _input("INPUT1", size=68)]),
            _DATA,
        ),  # sizes off the shapes
        (_plain(inputs=[_input("INPUT0", shape=[2, 8]), _input("INPUT1", shape=[1, 16])]), _DATA),
        (_plain(inputs=[_input("E", shape=[0, 16], size=0)]), b""),
        (_plain(inputs=[_input("INPUT0", parameters={"shared_memory_region": "r"})]), b""),
    ]


@pytest.mark.parametrize("index", range(len(_variants())))
def test_each_request_reads_as_the_general_decoder_reads_it_first_and_again(index: int) -> None:
    header, data = _variants()[index]
    body, length = _body(header, data)
    _same(body, length)  # learns the layout (or that there is none)
    _same(body, length)  # uses it
    again = body[:length] + bytes(reversed(body[length:]))  # the same header, new data
    _same(again, length)


def test_the_plain_request_is_served_from_its_layout(fresh_layouts: LayoutCache) -> None:
    body, length = _body(_plain(), _DATA)
    first = codec.decode_infer_request(body, length, "add_sub", "")
    assert first.layout is None
    second = codec.decode_infer_request(body[:length] + _DATA[::-1], length, "add_sub", "")
    assert second.layout is not None and second.layout is fresh_layouts.get(body[:length])
    assert second.inputs[0].data.tobytes() == _DATA[::-1][:64]
    # a header the layouts leave to the general decoder
    controls, controls_length = _body(_plain(parameters={"sequence_id": 7}), _DATA)
    codec.decode_infer_request(controls, controls_length, "add_sub", "")
    assert codec.decode_infer_request(controls, controls_length, "add_sub", "").layout is None


def test_requests_from_one_layout_share_nothing_mutable() -> None:
    body, length = _body(_plain(), _DATA)
    codec.decode_infer_request(body, length, "add_sub", "")
    first = codec.decode_infer_request(body, length, "add_sub", "")
    first.parameters["forwarded"] = "x"
    first.inputs[0].parameters["extra"] = 1
    assert first.outputs is not None
    first.outputs[0].binary = False
    second = codec.decode_infer_request(body, length, "add_sub", "")
    assert second.parameters == {}
    assert second.inputs[0].parameters == {"binary_data_size": 64}
    assert second.outputs is not None and second.outputs[0].binary is True


def test_a_request_with_a_known_header_but_other_data_sizes_is_refused_in_the_same_words() -> None:
    body, length = _body(_plain(), _DATA)
    _same(body, length)
    _same(body, length)
    short = _same(body[:-4], length)
    assert isinstance(short[1], str) and "expecting 4 additional bytes" in short[1]
    longer = _same(body + b"\0" * 4, length)
    assert "unexpected additional input data" in longer[1]


def test_the_table_of_layouts_is_bounded(fresh_layouts: LayoutCache) -> None:
    for i in range(MAX_LAYOUTS + 10):
        body, length = _body(_plain(id=f"request-{i}"), _DATA)
        _same(body, length)
    assert len(fresh_layouts._layouts) <= MAX_LAYOUTS
