"""Schedulers: how requests reach a model's instances."""

from nereid.scheduling.default import DefaultScheduler

__all__ = ["DefaultScheduler"]
