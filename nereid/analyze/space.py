"""The search space: which settings of each model are tried, and how a point becomes a config override.

A candidate is one value per dimension, in the space's order. Settings that only matter with dynamic
batching (max batch size, queue delay, preferred sizes) take the model's own values while batching is
off, so that no two candidates differ only in settings that have no effect.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Value = int | str | bool

INSTANCES = "instances"
EXECUTION_MODE = "execution_mode"
INTRA_OP_THREADS = "intra_op_threads"
DYNAMIC_BATCHING = "dynamic_batching"
MAX_BATCH_SIZE = "max_batch_size"
QUEUE_DELAY_US = "queue_delay_us"
PREFERRED = "preferred"
# Dimensions that only matter while dynamic batching is on.
_BATCHING_ONLY = (MAX_BATCH_SIZE, QUEUE_DELAY_US, PREFERRED)
# intra_op_threads 0: ONNX Runtime's threads left to Nereid (the host's cores shared among instances).
AUTO_THREADS = 0


@dataclass(frozen=True)
class Choices:
    """The values tried for each kind of setting (the command line's lists)."""

    instances: tuple[int, ...] = (1, 2, 4)
    max_batch_sizes: tuple[int, ...] = (8, 32)
    queue_delays_us: tuple[int, ...] = (0, 1000)
    preferred: tuple[str, ...] = ("max", "half")
    execution_modes: tuple[str, ...] = ("process", "thread")
    intra_op_threads: tuple[int, ...] = (1, 2)
    dynamic_batching: tuple[bool, ...] = (False, True)


@dataclass(frozen=True)
class Dimension:
    model: str
    name: str
    values: tuple[Value, ...]  # in the order a quick search steps through them
    default: Value  # the model's own setting


@dataclass(frozen=True)
class Candidate:
    """One value per dimension of its space, in the space's order."""

    values: tuple[Value, ...]


@dataclass(frozen=True)
class Space:
    dimensions: tuple[Dimension, ...]
    models: tuple[str, ...]  # the models whose configs the search changes
    configs: dict[str, dict[str, Any]] = field(compare=False, hash=False)  # each model's own config JSON

    def default(self) -> Candidate:
        return Candidate(tuple(d.default for d in self.dimensions))

    def normalize(self, candidate: Candidate) -> Candidate:
        """The same candidate with batching-only settings at the model's own values where batching is off."""
        values = list(candidate.values)
        for i, dim in enumerate(self.dimensions):
            if dim.name in _BATCHING_ONLY and not self._batching(values, dim.model):
                values[i] = dim.default
            elif (
                dim.name == PREFERRED
                and values[i] == "half"
                and int(self._value(values, dim.model, MAX_BATCH_SIZE)) < 2
            ):
                values[i] = "max"  # half of 1 is 1: full batches
        return Candidate(tuple(values))

    def _value(self, values: Sequence[Value], model: str, name: str) -> Value:
        """`model`'s setting `name` among `values` (False where the model has no such dimension)."""
        for i, dim in enumerate(self.dimensions):
            if dim.model == model and dim.name == name:
                return values[i]
        return False

    def _batching(self, values: Sequence[Value], model: str) -> bool:
        return bool(self._value(values, model, DYNAMIC_BATCHING))

    def _per_model(self) -> list[tuple[list[int], list[tuple[Value, ...]]]]:
        """For each model: its dimensions' positions, and its distinct combinations of their values."""
        out = []
        for model in self.models:
            positions = [i for i, d in enumerate(self.dimensions) if d.model == model]
            sub = Space(tuple(self.dimensions[i] for i in positions), (model,), {})
            combos = {
                sub.normalize(Candidate(v)).values: None
                for v in itertools.product(*(d.values for d in sub.dimensions))
            }
            out.append((positions, list(combos)))
        return out

    def size(self) -> int:
        """How many distinct candidates the space has (without listing them: an ensemble's is large)."""
        return math.prod(len(combos) for _, combos in self._per_model())

    def candidates(self) -> Iterator[Candidate]:
        """Every distinct candidate, the default first, one at a time."""
        default = self.default()
        yield default
        per_model = self._per_model()
        for choice in itertools.product(*(combos for _, combos in per_model)):
            values: list[Value] = list(default.values)
            for (positions, _), combo in zip(per_model, choice, strict=True):
                for i, value in zip(positions, combo, strict=True):
                    values[i] = value
            candidate = Candidate(tuple(values))
            if candidate != default:
                yield candidate

    def steps(self, candidate: Candidate, i: int) -> list[Candidate]:
        """Candidates that change dimension `i` alone, the values nearest the current one first. Every
        value, not only the adjacent ones: an ensemble runs at its slowest step's pace, so a step may only
        pay off once another member is faster, and settings such as ONNX Runtime's automatic threads have
        no order. None while `i` only matters with batching and batching is off."""
        dim = self.dimensions[i]
        if dim.name in _BATCHING_ONLY and not self._batching(candidate.values, dim.model):
            return []
        here = dim.values.index(candidate.values[i]) if candidate.values[i] in dim.values else 0
        out = []
        for value in sorted(dim.values, key=lambda v: abs(dim.values.index(v) - here)):
            values = list(candidate.values)
            values[i] = value
            step = self.normalize(Candidate(tuple(values)))
            if step != candidate:
                out.append(step)
        return out

    def settings(self, candidate: Candidate) -> dict[str, dict[str, Value]]:
        """model -> {dimension name: value}."""
        out: dict[str, dict[str, Value]] = {model: {} for model in self.models}
        for dim, value in zip(self.dimensions, candidate.values, strict=True):
            out[dim.model][dim.name] = value
        return out

    def key(self, candidate: Candidate) -> str:
        """A stable text naming the candidate (checkpoints and reports use it)."""
        return "; ".join(
            f"{model}: " + " ".join(f"{name}={_text(name, value)}" for name, value in values.items())
            for model, values in self.settings(candidate).items()
        )

    def describe(self, candidate: Candidate) -> str:
        """Only what differs from the models' own configs, for progress lines."""
        changed = [
            f"{dim.model}.{dim.name}={_text(dim.name, value)}"
            for dim, value in zip(self.dimensions, candidate.values, strict=True)
            if value != dim.default
        ]
        return " ".join(changed) or "the models' own configs"

    def override(self, candidate: Candidate, model: str) -> dict[str, Any]:
        """The config JSON that loads `model` as `candidate` sets it."""
        return apply_settings(self.configs[model], self.settings(candidate)[model])


def _text(name: str, value: Value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == INTRA_OP_THREADS and value == AUTO_THREADS:
        return "auto"
    return str(value)


def backend_kind(config: dict[str, Any]) -> str:
    """`python`, `onnxruntime`, `ensemble` or `other`."""
    backend, platform = config.get("backend", ""), config.get("platform", "")
    if platform == "ensemble":
        return "ensemble"
    if backend == "python":
        return "python"
    if backend == "onnxruntime" or platform == "onnxruntime_onnx":
        return "onnxruntime"
    return "other"


def _parameter(config: dict[str, Any], key: str) -> str:
    return str(config.get("parameters", {}).get(key, {}).get("string_value", ""))


def _with_default(values: Sequence[Value], default: Value) -> tuple[Value, ...]:
    """`values` with the model's own setting among them (sorted where they are numbers)."""
    if default in values:
        return tuple(values)
    merged = [*values, default]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in merged):
        merged.sort()  # type: ignore[arg-type]
    return tuple(merged)


def model_dimensions(name: str, config: dict[str, Any], choices: Choices) -> list[Dimension]:
    """The dimensions searched for one (non-ensemble) model, from its config JSON."""
    groups = config.get("instance_group") or [{"count": 1}]
    instances = int(sum(int(g.get("count", 1)) for g in groups))
    dims = [Dimension(name, INSTANCES, _with_default(choices.instances, instances), instances)]
    kind = backend_kind(config)
    if kind == "python" and choices.execution_modes:
        mode = _parameter(config, "EXECUTION_MODE").lower() or "process"
        dims.append(Dimension(name, EXECUTION_MODE, _with_default(choices.execution_modes, mode), mode))
    if kind == "onnxruntime" and choices.intra_op_threads:
        own = _parameter(config, "intra_op_thread_count")
        threads = int(own) if own.isdigit() else AUTO_THREADS
        values = _with_default(choices.intra_op_threads, threads)
        dims.append(Dimension(name, INTRA_OP_THREADS, values, threads))
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch > 0 and True in choices.dynamic_batching:
        batching = config.get("dynamic_batching")
        on = batching is not None
        dims.append(Dimension(name, DYNAMIC_BATCHING, _with_default(choices.dynamic_batching, on), on))
        dims.append(
            Dimension(name, MAX_BATCH_SIZE, _with_default(choices.max_batch_sizes, max_batch), max_batch)
        )
        delay = int((batching or {}).get("max_queue_delay_microseconds", 0))
        dims.append(Dimension(name, QUEUE_DELAY_US, _with_default(choices.queue_delays_us, delay), delay))
        preferred = _preferred_kind(batching, max_batch)
        dims.append(Dimension(name, PREFERRED, _with_default(choices.preferred, preferred), preferred))
    return dims


def _preferred_kind(batching: dict[str, Any] | None, max_batch: int) -> str:
    """A model's preferred batch sizes as the search names them: `max` where none are set or the max batch
    size alone (the same to the batcher: Triton prefers full batches unless told otherwise), `half` for
    half the max batch size alone, `own` for any other list (kept as the model has it)."""
    sizes = list((batching or {}).get("preferred_batch_size") or [])
    if not sizes or sizes == [max_batch]:
        return "max"
    return "half" if sizes == [max_batch // 2] else "own"


def apply_settings(config: dict[str, Any], settings: dict[str, Value]) -> dict[str, Any]:
    """A copy of `config` (Triton's JSON form) with `settings` applied."""
    out = copy.deepcopy(config)
    if INSTANCES in settings:
        groups = out.get("instance_group") or [{}]
        first = {k: v for k, v in groups[0].items() if k in ("name", "kind", "rate_limiter")}
        first.update(count=int(settings[INSTANCES]), kind="KIND_CPU")
        out["instance_group"] = [first]
    parameters = out.setdefault("parameters", {})
    if EXECUTION_MODE in settings:
        parameters["EXECUTION_MODE"] = {"string_value": str(settings[EXECUTION_MODE])}
    if INTRA_OP_THREADS in settings:
        if settings[INTRA_OP_THREADS] == AUTO_THREADS:
            parameters.pop("intra_op_thread_count", None)
        else:
            parameters["intra_op_thread_count"] = {"string_value": str(settings[INTRA_OP_THREADS])}
    if not parameters:
        del out["parameters"]
    if DYNAMIC_BATCHING in settings:
        if not settings[DYNAMIC_BATCHING]:
            out.pop("dynamic_batching", None)
        else:
            max_batch = int(settings[MAX_BATCH_SIZE])
            out["max_batch_size"] = max_batch
            batching = dict(out.get("dynamic_batching") or {})
            batching["max_queue_delay_microseconds"] = int(settings[QUEUE_DELAY_US])
            own = [size for size in batching.pop("preferred_batch_size", None) or [] if size <= max_batch]
            if settings[PREFERRED] == "half":
                batching["preferred_batch_size"] = [max(1, max_batch // 2)]
            elif settings[PREFERRED] == "own" and own:
                batching["preferred_batch_size"] = own
            out["dynamic_batching"] = batching
    return out


def build_space(configs: dict[str, dict[str, Any]], searched: Sequence[str], choices: Choices) -> Space:
    """The space over the models in `searched` (an ensemble's composing models, or the model itself)."""
    dims: list[Dimension] = []
    for name in searched:
        dims.extend(model_dimensions(name, configs[name], choices))
    return Space(tuple(dims), tuple(searched), {name: configs[name] for name in searched})
