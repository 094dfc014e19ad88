"""Deterministic fake measurers: throughput and latency as plain functions of a candidate's settings."""

from __future__ import annotations

from collections.abc import Callable

from nereid.analyze.search import CandidateFailed, Measurement
from nereid.analyze.space import Candidate, Choices, Space, build_space

PYTHON_MODEL = {
    "name": "add_sub",
    "backend": "python",
    "max_batch_size": 64,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}
ONNX_MODEL = {
    "name": "detector",
    "backend": "onnxruntime",
    "max_batch_size": 8,
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}

Landscape = Callable[[dict[str, dict[str, object]], int], float]


def python_space(choices: Choices | None = None) -> Space:
    return build_space({"add_sub": PYTHON_MODEL}, ["add_sub"], choices or Choices())


def ensemble_space(choices: Choices | None = None) -> Space:
    return build_space(
        {"pre": PYTHON_MODEL, "detector": ONNX_MODEL}, ["pre", "detector"], choices or Choices()
    )


class FakeMeasurer:
    """Measurements from `landscape(settings, concurrency) -> infer/s`; latency is Little's law's.
    Counts the distinct candidates and the measurements asked for."""

    def __init__(self, space: Space, landscape: Landscape, failing: frozenset[str] = frozenset()) -> None:
        self.space, self.landscape, self.failing = space, landscape, failing
        self.candidates: set[Candidate] = set()
        self.calls = 0

    def __call__(self, candidate: Candidate, concurrency: int) -> Measurement:
        self.calls += 1
        self.candidates.add(candidate)
        if self.space.key(candidate) in self.failing:
            raise CandidateFailed("model 'add_sub' failed to load: instance 4 would not start")
        throughput = self.landscape(self.space.settings(candidate), concurrency)
        latency_ms = concurrency / throughput * 1000.0
        return Measurement(
            concurrency,
            throughput,
            latency_ms,
            latency_ms * 1.2,
            latency_ms * 1.5,
            1e6 / throughput,
            100.0,
            int(throughput),
            True,
        )


def python_landscape(settings: dict[str, dict[str, object]], concurrency: int) -> float:
    """Peaks at 2 instances, thread mode, dynamic batching to 32 with no delay; saturates with load."""
    s = settings["add_sub"]
    capacity = 1000.0 * {1: 1.0, 2: 1.7, 4: 1.5}[int(s["instances"])]
    capacity *= 1.6 if s["execution_mode"] == "thread" else 1.0
    if s.get("dynamic_batching"):
        capacity *= {8: 1.4, 32: 1.8, 64: 1.7}[int(s["max_batch_size"])]
        capacity *= 1.0 if s["queue_delay_us"] == 0 else 0.9
        capacity *= 1.0 if s["preferred"] == "max" else 0.95
    return capacity * concurrency / (concurrency + 3)


def flat_landscape(settings: dict[str, dict[str, object]], concurrency: int) -> float:
    """The models' own configs are already the best: every change costs."""
    s = settings["add_sub"]
    penalty = (s["instances"] != 1) + (s["execution_mode"] != "process") + bool(s["dynamic_batching"])
    return 500.0 / (1 + penalty) * concurrency / (concurrency + 1)


def ensemble_landscape(settings: dict[str, dict[str, object]], concurrency: int) -> float:
    """A pipeline runs as fast as its slowest step: each member's own capacity, the minimum of both."""
    pre, det = settings["pre"], settings["detector"]
    pre_capacity = 800.0 * (1.5 if pre["execution_mode"] == "thread" else 1.0) * min(int(pre["instances"]), 2)
    det_capacity = 600.0 * {0: 1.0, 1: 0.8, 2: 1.3}[int(det["intra_op_threads"])]
    if det["dynamic_batching"]:
        det_capacity *= 2.0
    return min(pre_capacity, det_capacity) * concurrency / (concurrency + 2)
