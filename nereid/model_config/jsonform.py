"""ModelConfig <-> Triton's JSON form (the body of GET /v2/models/{m}/config)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument

_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """All fields printed with their proto names; int64 fields as JSON numbers, as Triton prints them
    (protobuf's own printer would quote them)."""
    data = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    _unquote_int64(data, config.DESCRIPTOR)
    return data


def config_from_json(data: dict[str, Any]) -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        json_format.ParseDict(data, config)
    except json_format.ParseError as exc:
        raise InvalidArgument(f"failed to parse model configuration JSON: {exc}") from None
    return config


def _unquote_int64(data: dict[str, Any], descriptor: Descriptor) -> None:
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                for key, item in value.items():
                    value[key] = _convert(item, value_field)
            elif field.label == FieldDescriptor.LABEL_REPEATED:
                for item in value:
                    _unquote_int64(item, field.message_type)
            else:
                _unquote_int64(value, field.message_type)
        elif field.type in _INT64_TYPES:
            if field.label == FieldDescriptor.LABEL_REPEATED:
                data[field.name] = [int(v) for v in value]
            else:
                data[field.name] = int(value)


def _convert(value: Any, field: FieldDescriptor) -> Any:
    if field.message_type is not None:
        _unquote_int64(value, field.message_type)
        return value
    return int(value) if field.type in _INT64_TYPES else value
