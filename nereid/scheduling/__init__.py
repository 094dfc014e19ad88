"""Schedulers: how requests reach a model's instances. `create_scheduler` picks one from the config."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import AsyncModelInstance, ModelInstance
from nereid.scheduling.base import Scheduler
from nereid.scheduling.default import DefaultScheduler
from nereid.scheduling.dynamic import BatcherConfig, DynamicBatcher
from nereid.scheduling.instances import InstancePool
from nereid.scheduling.sequence import SequenceBatcher
from nereid.statistics import ModelStatistics


def create_scheduler(
    label: str,
    config: mc.ModelConfig,
    instances: Sequence[ModelInstance | AsyncModelInstance],
    statistics: ModelStatistics,
    model_dir: Path | None = None,
) -> DefaultScheduler | DynamicBatcher | SequenceBatcher:
    """The scheduler the config asks for; `label` names the model version in its messages. `model_dir`
    holds files some schedulers read (the sequence batcher's initial state files)."""
    if config.HasField("sequence_batching"):
        return SequenceBatcher(label, config, instances, model_dir, statistics)
    # Without a batch dimension there is nothing to batch: Triton runs each request on its own then.
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        return DynamicBatcher(label, BatcherConfig.from_config(config), instances, statistics)
    return DefaultScheduler(label, instances)


__all__ = [
    "DefaultScheduler",
    "DynamicBatcher",
    "InstancePool",
    "Scheduler",
    "SequenceBatcher",
    "create_scheduler",
]
