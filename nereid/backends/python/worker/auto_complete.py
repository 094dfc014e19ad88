"""The ModelConfig helper that a model's static `auto_complete_config` receives (pb_utils.ModelConfig)."""

from __future__ import annotations

import json
from typing import Any, Sequence


class ModelConfig:
    """The model configuration handed to `auto_complete_config`: read it with as_dict, add to it with the
    setters. Conflicts with what config.pbtxt already says raise ValueError and fail the load."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("input", [])
        config.setdefault("output", [])
        config.setdefault("max_batch_size", 0)
        self._model_config: dict[str, Any] = config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"auto_complete_config of model '{self._name()}' sets max_batch_size {max_batch_size}, below "
                f"the configured {configured}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"auto_complete_config of model '{self._name()}' asks for dynamic_batching, but the "
                    f"configuration already uses '{scheduler}'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 (Triton's parameter name)
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: Sequence[str]) -> None:
        model = self._name()
        label = f"{kind} '{tensor.get('name', '?')}' of auto_complete_config in model '{model}'"
        unknown = [key for key in tensor if key not in allowed]
        if unknown:
            raise ValueError(f"{label} has properties {unknown}; only {list(allowed)} are allowed")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} lacks the '{key}' property")
        for existing in self._model_config[kind]:
            if existing.get("name") != tensor["name"]:
                continue
            configured_type = existing.get("data_type", "TYPE_INVALID")
            if configured_type not in ("TYPE_INVALID", tensor["data_type"]):
                raise ValueError(
                    f"model '{model}': the configuration gives {kind} '{tensor['name']}' data type "
                    f"{configured_type}, auto_complete_config gives {tensor['data_type']}"
                )
            if existing.get("dims") and list(existing["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}': the configuration gives {kind} '{tensor['name']}' dims "
                    f"{list(existing['dims'])}, auto_complete_config gives {list(tensor['dims'])}"
                )
            if "optional" in existing and "optional" in tensor and existing["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{model}': the configuration makes {kind} '{tensor['name']}' optional "
                    f"{existing['optional']}, auto_complete_config says {tensor['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(dict(tensor))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        unknown = [key for key in transaction_policy_dict if key != "decoupled"]
        if unknown:
            raise ValueError(
                f"auto_complete_config of model '{self._name()}': the transaction policy may only set "
                f"'decoupled', not {unknown}"
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"auto_complete_config of model '{self._name()}' sets decoupled to {wanted}, but the "
                    f"configuration says {policy['decoupled']}"
                )
            policy["decoupled"] = wanted
