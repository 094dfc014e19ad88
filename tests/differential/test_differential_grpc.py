"""Every case of cases.json over gRPC as well: the same request sent to Triton's and Nereid's gRPC endpoints.

An HTTP case is translated into its gRPC equivalent (route -> RPC, JSON `data` -> typed `contents`,
binary tensors -> `raw_input_contents`, parameters -> InferParameter). A case whose request only exists in
JSON says so with `"grpc": {"http_only": "why"}`. A case with `rpc` and `request` (protobuf's JSON form) is
a gRPC request with no HTTP form. `grpc.code` and `grpc.error` state where Nereid answers differently
on purpose, as `nereid_status` and `error` do for HTTP.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.frontends.grpc.codec import CONTENTS_FIELD
from tests.differential.compare import same_message, same_shape
from tests.differential.conftest import Servers

pytestmark = pytest.mark.differential

CASES = json.loads((Path(__file__).parent / "cases.json").read_text())
GRPC_CASES = [case for case in CASES if "http_only" not in case.get("grpc", {})]

_MODEL_ROUTE = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(?:/(ready|config|infer|stats))?")
_SERVER_ROUTES = {
    "/v2/health/live": ("ServerLive", pb.ServerLiveRequest),
    "/v2/health/ready": ("ServerReady", pb.ServerReadyRequest),
    "/v2": ("ServerMetadata", pb.ServerMetadataRequest),
}
# The typed contents field a client fills for each datatype. FP16 and BF16 have none: a client that
# tries sends FP32 values, which Triton refuses.
_FIELD = {**CONTENTS_FIELD, "FP16": "fp32_contents", "BF16": "fp32_contents"}
_NUMPY = {"BOOL": "?", "INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "UINT8": "<u1"}
_NUMPY |= {"UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}


def grpc_request(case: dict[str, Any]) -> tuple[str, Message]:
    """The RPC and request message that ask what the case asks."""
    if "rpc" in case:
        message_type = getattr(pb, f"{case['rpc']}Request")
        return case["rpc"], json_format.ParseDict(case["request"], message_type())
    path = case["path"]
    if path == "/v2/models/stats":
        return "ModelStatistics", pb.ModelStatisticsRequest()
    if path in _SERVER_ROUTES and case["method"] == "GET":
        rpc, message_type = _SERVER_ROUTES[path]
        return rpc, message_type()
    match = _MODEL_ROUTE.fullmatch(path)
    if match is None:
        raise ValueError(f"case {case['name']!r} has no gRPC equivalent: mark it http_only")
    name, version, action = match.group(1), match.group(2) or "", match.group(3)
    if action == "infer":
        return "ModelInfer", _infer_request(case, name, version)
    rpc, message_type = {
        None: ("ModelMetadata", pb.ModelMetadataRequest),
        "ready": ("ModelReady", pb.ModelReadyRequest),
        "config": ("ModelConfig", pb.ModelConfigRequest),
        "stats": ("ModelStatistics", pb.ModelStatisticsRequest),
    }[action]
    return rpc, message_type(name=name, version=version)


def _infer_request(case: dict[str, Any], name: str, version: str) -> pb.ModelInferRequest:
    document = case["json"] if "json" in case else case["binary"]["json"]
    tail = bytes.fromhex(case["binary"]["tail_hex"]) if "binary" in case else b""
    message = pb.ModelInferRequest(model_name=name, model_version=version, id=document.get("id", ""))
    _set_parameters(message.parameters, document.get("parameters", {}))
    # gRPC never mixes typed contents with raw ones: one binary input sends every input raw.
    raw = any("binary_data_size" in i.get("parameters", {}) for i in document["inputs"])
    offset = 0
    for item in document["inputs"]:
        parameters = dict(item.get("parameters", {}))
        size = parameters.pop("binary_data_size", None)
        tensor = message.inputs.add(name=item["name"], datatype=item["datatype"], shape=item["shape"])
        _set_parameters(tensor.parameters, parameters)
        values = _flatten(item.get("data", []))
        if raw:
            if size is None:
                message.raw_input_contents.append(_raw_bytes(values, item["datatype"]))
            else:
                message.raw_input_contents.append(tail[offset : offset + size])
                offset += size
        elif "data" in item:
            field = _FIELD.get(item["datatype"]) or _field_of_values(values)
            if field == "bytes_contents":
                values = [v.encode() for v in values]
            getattr(tensor.contents, field).extend(values)
    for item in document.get("outputs", []):
        output = message.outputs.add(name=item["name"])
        _set_parameters(output.parameters, item.get("parameters", {}))
    return message


def _flatten(data: Any) -> list[Any]:
    if isinstance(data, list):
        return [x for item in data for x in _flatten(item)]
    return [data]


def _field_of_values(values: list[Any]) -> str:
    """For a datatype Triton does not know: the field a client would use for such values."""
    first = values[0] if values else 0
    if isinstance(first, bool):
        return "bool_contents"
    if isinstance(first, str):
        return "bytes_contents"
    return "int_contents" if isinstance(first, int) else "fp32_contents"


def _raw_bytes(values: list[Any], datatype: str) -> bytes:
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)
    return np.array(values, dtype=_NUMPY[datatype]).tobytes()


def _set_parameters(target: Any, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, bool):
            target[key].bool_param = value
        elif isinstance(value, int):
            target[key].int64_param = value
        elif isinstance(value, float):
            target[key].double_param = value
        else:
            target[key].string_param = value


def _call(target: str, rpc: str, message: Message) -> tuple[grpc.StatusCode, str, Any]:
    with grpc.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            response = getattr(stub, rpc)(message, timeout=30)
        except grpc.RpcError as error:
            return error.code(), error.details(), None
    # Fields left at their defaults are printed too, so a zero counter on one side still compares.
    answer = json_format.MessageToDict(
        response, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return grpc.StatusCode.OK, "", answer


def _error_mode(case: dict[str, Any]) -> str:
    """`grpc.error`, else the case's own `error` (the texts are the same over both protocols), else exact."""
    return str(case.get("grpc", {}).get("error", case.get("error", "exact")))


def test_every_case_runs_over_grpc_or_says_why() -> None:
    for case in CASES:
        reason = case.get("grpc", {}).get("http_only")
        if reason is None:
            grpc_request(case)  # raises when there is no translation
        else:
            assert reason.strip(), f"case {case['name']!r}: http_only needs a reason"


@pytest.fixture(scope="module")
def grpc_targets(servers: Servers) -> Iterator[tuple[str, str]]:
    yield servers.triton_grpc, servers.nereid_grpc


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c["name"] for c in GRPC_CASES])
def test_same_grpc_answer(grpc_targets: tuple[str, str], case: dict[str, Any]) -> None:
    rpc, message = grpc_request(case)
    triton = _call(grpc_targets[0], rpc, message)
    nereid = _call(grpc_targets[1], rpc, message)
    expected = case.get("grpc", {})
    code = getattr(grpc.StatusCode, expected["code"]) if "code" in expected else triton[0]
    assert nereid[0] == code, f"status: Triton {triton[0]} {triton[1]!r}, Nereid {nereid[0]} {nereid[1]!r}"
    if triton[0] != grpc.StatusCode.OK or nereid[0] != grpc.StatusCode.OK:
        same_message(_error_mode(case), triton[1], nereid[1])
        return
    ignore = set(case.get("ignore", [])) | set(expected.get("ignore", []))
    same_shape(triton[2], nereid[2], "$", ignore, case.get("numbers") == "any")


def test_same_answers_inside_one_stream(grpc_targets: tuple[str, str]) -> None:
    """Every infer case through ModelStreamInfer: errors arrive as `error_message`, in request order."""
    cases = [case for case in GRPC_CASES if grpc_request(case)[0] == "ModelInfer"]
    requests = [grpc_request(case)[1] for case in cases]
    answers = []
    for target in grpc_targets:
        with grpc.insecure_channel(target) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answers.append(list(stub.ModelStreamInfer(iter(requests), timeout=60)))
    triton, nereid = answers
    assert len(triton) == len(nereid) == len(cases)
    for case, t, n in zip(cases, triton, nereid, strict=True):
        expected = case.get("grpc", {})
        differs = "code" in expected and expected["code"] != "OK"
        if t.error_message or n.error_message:
            assert bool(n.error_message) == (bool(t.error_message) != differs), f"{case['name']}: {t} / {n}"
            same_message(_error_mode(case), t.error_message, n.error_message)
            continue
        ignore = set(case.get("ignore", [])) | set(expected.get("ignore", []))
        t_dict = json_format.MessageToDict(t.infer_response, preserving_proto_field_name=True)
        n_dict = json_format.MessageToDict(n.infer_response, preserving_proto_field_name=True)
        same_shape(t_dict, n_dict, f"$[{case['name']}]", ignore)
