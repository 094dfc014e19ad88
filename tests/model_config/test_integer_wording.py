"""Integer errors in config.pbtxt carry the C++ parser's words, which Triton's users and tools look for."""

from __future__ import annotations

import pytest

from nereid.errors import ModelConfigError
from nereid.model_config.parse import ConfigSource, parse_config_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("-5", "Expected integer, got: -"),
        ('"invalid_value"', 'Expected integer, got: "invalid_value"'),
        ("12345678901", "Integer out of range (12345678901)"),
    ],
)
def test_unsigned_field_errors(value: str, text: str) -> None:
    config = f'name: "m"\nensemble_scheduling {{\n  max_inflight_requests: {value}\n}}\n'
    with pytest.raises(ModelConfigError) as raised:
        parse_config_text(config, ConfigSource(None, config))
    assert raised.value.message.endswith(f"3:26: '  max_inflight_requests: {value}': {text}")
