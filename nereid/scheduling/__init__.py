"""Schedulers: how requests reach a model's instances. `create_scheduler` picks one from the config."""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import AsyncModelInstance, ModelInstance
from nereid.scheduling.base import Scheduler
from nereid.scheduling.default import DefaultScheduler


def create_scheduler(
    label: str, config: mc.ModelConfig, instances: Sequence[ModelInstance | AsyncModelInstance]
) -> Scheduler:
    """The scheduler the config asks for; `label` names the model version in its messages."""
    return DefaultScheduler(label, instances)


__all__ = ["DefaultScheduler", "Scheduler", "create_scheduler"]
