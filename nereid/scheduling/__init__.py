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
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.scheduling.sequence import SequenceBatcher
from nereid.statistics import ModelStatistics


def create_scheduler(
    label: str,
    config: mc.ModelConfig,
    instances: Sequence[ModelInstance | AsyncModelInstance],
    statistics: ModelStatistics,
    model_dir: Path | None = None,
    limiter: RateLimiter | None = None,
    claims: Sequence[Claim] = (),
) -> DefaultScheduler | DynamicBatcher | SequenceBatcher:
    """The scheduler the config asks for; `label` names the model version in its messages. `model_dir`
    holds files some schedulers read (the sequence batcher's initial state files). With a rate limiter,
    `claims` says what each instance needs to run."""
    if config.HasField("sequence_batching"):
        return SequenceBatcher(
            label, config, instances, model_dir, statistics, limiter=limiter, claims=claims
        )
    # Without a batch dimension there is nothing to batch: Triton runs each request on its own then.
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        batching = BatcherConfig.from_config(config)
        return DynamicBatcher(label, batching, instances, statistics, limiter=limiter, claims=claims)
    return DefaultScheduler(label, instances, limiter=limiter, claims=claims)


__all__ = [
    "DefaultScheduler",
    "DynamicBatcher",
    "InstancePool",
    "Scheduler",
    "SequenceBatcher",
    "create_scheduler",
]
