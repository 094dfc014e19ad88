"""config.pbtxt: parse Triton's ModelConfig text format, validate, auto-complete, print as JSON."""

from nereid.model_config.jsonform import config_from_json, config_to_json
from nereid.model_config.parse import ConfigSource, read_config
from nereid.model_config.validate import check_response_cache, validate_config

__all__ = [
    "ConfigSource",
    "check_response_cache",
    "config_from_json",
    "config_to_json",
    "read_config",
    "validate_config",
]
