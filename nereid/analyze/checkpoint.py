"""Every measurement kept on disk as it is made, so that an interrupted run resumes where it stopped.

A resumed search replays from the start: the searches are deterministic given their measurements, so
each candidate already measured is answered from the checkpoint at once and the search reaches the first
one it has not measured yet. A checkpoint made with other settings (models, space, goal, protocol) is
set aside, not mixed in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nereid.analyze.search import CandidateFailed, Measurement
from nereid.analyze.space import Candidate


class Checkpoint:
    def __init__(self, path: Path, fingerprint: dict[str, Any]) -> None:
        self.path, self.fingerprint = path, fingerprint
        self.measurements: dict[str, dict[str, dict[str, Any]]] = {}
        self.failures: dict[str, str] = {}
        self.resumed = 0
        self.set_aside: Path | None = None
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("fingerprint") == fingerprint:
                self.measurements = saved.get("measurements", {})
                self.failures = saved.get("failures", {})
                self.resumed = sum(len(v) for v in self.measurements.values()) + len(self.failures)
            else:
                self.set_aside = path.with_suffix(".other-settings.json")
                path.replace(self.set_aside)

    def lookup(self, key: str, concurrency: int) -> Measurement | None:
        found = self.measurements.get(key, {}).get(str(concurrency))
        return Measurement(**found) if found is not None else None

    def failure(self, key: str) -> str | None:
        return self.failures.get(key)

    def record(self, key: str, measurement: Measurement) -> None:
        self.measurements.setdefault(key, {})[str(measurement.concurrency)] = dataclasses.asdict(measurement)
        self._save()

    def record_failure(self, key: str, reason: str) -> None:
        self.failures[key] = reason
        self._save()

    def _save(self) -> None:
        document = {
            "fingerprint": self.fingerprint,
            "measurements": self.measurements,
            "failures": self.failures,
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=1))
        os.replace(temporary, self.path)  # a Ctrl-C mid-write leaves the previous checkpoint whole


class BudgetSpent(Exception):
    """The time budget has passed: the search stops and the report covers what was measured."""


class CheckpointedMeasure:
    """A searches' measurer over a checkpoint: answers what it holds at once; otherwise loads the candidate
    (once for all its concurrencies), measures it and keeps the result; stops once `deadline` passes."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        key: Callable[[Candidate], str],
        load: Callable[[Candidate], None],
        measure: Callable[[int], Measurement],
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checkpoint, self._key, self._load, self._measure = checkpoint, key, load, measure
        self._deadline, self._clock = deadline, clock
        self._loaded: Candidate | None = None
        self.fresh = 0  # measurements made by this run (not from the checkpoint)

    def __call__(self, candidate: Candidate, concurrency: int) -> Measurement:
        key = self._key(candidate)
        failure = self._checkpoint.failure(key)
        if failure is not None:
            raise CandidateFailed(failure)
        kept = self._checkpoint.lookup(key, concurrency)
        if kept is not None:
            return kept
        if self._deadline is not None and self._clock() >= self._deadline:
            raise BudgetSpent
        try:
            if self._loaded != candidate:
                self._loaded = None
                self._load(candidate)
                self._loaded = candidate
            measurement = self._measure(concurrency)
        except CandidateFailed as exc:
            self._checkpoint.record_failure(key, str(exc))
            raise
        self.fresh += 1
        self._checkpoint.record(key, measurement)
        return measurement
