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

# 64-bit fields Triton leaves quoted: its printer unquotes a fixed list of fields, and these are not on it.
_QUOTED = frozenset({"inference.ModelSequenceBatching.InitialState.dims"})


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """All fields, in declaration order, with their proto names; int64 fields as JSON numbers, as Triton
    prints them (protobuf's own printer would quote them)."""
    data = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _normalize(data, config.DESCRIPTOR)


def config_from_json(data: dict[str, Any]) -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        json_format.ParseDict(_single_items_listed(data, config.DESCRIPTOR), config)
    except json_format.ParseError as exc:
        raise InvalidArgument(f"failed to parse model configuration JSON: {exc}") from None
    return config


def _single_items_listed(data: Any, descriptor: Descriptor) -> Any:
    """A repeated message field given one object (`"instance_group": {"kind": ...}`) as a list of it:
    Triton takes that form, protobuf's parser alone does not."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key, value in data.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None or field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if _is_repeated(field):
            items = [value] if isinstance(value, dict) else value
            if isinstance(items, list):
                out[key] = [_single_items_listed(item, field.message_type) for item in items]
        else:
            out[key] = _single_items_listed(value, field.message_type)
    return out


def _normalize(data: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """Reorder keys as the message declares its fields, and unquote 64-bit integers."""
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name in data:
            out[field.name] = _value(data[field.name], field)
    return out


def _value(value: Any, field: FieldDescriptor) -> Any:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        value_field = message.fields_by_name["value"]
        return {key: _scalar_or_message(item, value_field) for key, item in value.items()}
    if _is_repeated(field):
        return [_scalar_or_message(item, field) for item in value]
    return _scalar_or_message(value, field)


def _scalar_or_message(value: Any, field: FieldDescriptor) -> Any:
    if field.message_type is not None:
        return _normalize(value, field.message_type)
    return int(value) if field.type in _INT64_TYPES and field.full_name not in _QUOTED else value


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6 deprecates `label`; older releases lack `is_repeated`.
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED
