"""Loading an ensemble: its config, checked against the composing models loaded now, and one
ModelVersion per version folder with an EnsembleScheduler. Texts of the checks are Triton's."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2 as mc

from nereid.errors import InvalidArgument, NereidError
from nereid.model_config import (
    ConfigSource,
    check_response_cache,
    config_to_json,
    read_config,
    validate_config,
)
from nereid.model_config.ensemble import is_ensemble, step_models, validate_ensemble_config
from nereid.repository.ensemble_flow import decoupled_flow
from nereid.repository.model import ModelVersion, model_metadata, read_labels, tensor_specs
from nereid.repository.scan import ModelSource, select_versions, version_folders
from nereid.scheduling.ensemble import EnsembleMembers, EnsembleScheduler, EnsembleStep, ensemble_steps
from nereid.settings import ServerSettings
from nereid.statistics import ModelStatistics

if TYPE_CHECKING:
    from nereid.repository.loader import LoadResult


def source_ensemble_members(source: ModelSource, settings: ServerSettings) -> frozenset[str] | None:
    """The models an ensemble folder's steps call, or None when the folder holds no ensemble (or a
    config that cannot be read: loading it reports why)."""
    try:
        config, _ = read_config(source.path, settings.model_config_name)
    except NereidError:
        return None
    return step_models(config) if is_ensemble(config) else None


def load_ensemble(
    source: ModelSource,
    config: mc.ModelConfig,
    config_source: ConfigSource,
    members: EnsembleMembers,
    result: LoadResult,
    serving: Mapping[int, ModelVersion] | None,
    statistics: Callable[[], ModelStatistics] = ModelStatistics,
) -> None:
    """Fill `result` with the ensemble's versions, or with why it cannot load; `statistics` makes each
    version's statistics (with the latency summaries and histograms the server's settings ask for)."""
    started = time.monotonic()
    name = source.name
    if not config.name:
        config.name = name
    result.members = step_models(config)
    try:
        _fill_defaults(config)
        validate_config(config, config_source, name)
        validate_ensemble_config(config)
        member_configs = check_members(config, members)
        declared = config.model_transaction_policy.decoupled
        # as in Triton, the steps decide, whatever the ensemble's own config says
        config.model_transaction_policy.decoupled = decoupled_flow(config, member_configs)
        check_response_cache(config, declared or config.model_transaction_policy.decoupled)
        labels = _labels(source, config, members)
    except NereidError as exc:
        result.failures[None] = exc.message
        return
    folders = version_folders(source.path)
    wanted = select_versions(config.version_policy, list(folders), source.name)
    if not wanted:
        result.failures[None] = f"model '{name}' has no versions to load under its version policy"
    config_json = config_to_json(config)
    if not config.ensemble_scheduling.max_inflight_requests:
        del config_json["ensemble_scheduling"]["max_inflight_requests"]  # a field Triton 2.51 lacks
    steps = ensemble_steps(config, member_configs)
    for version in wanted:
        if version not in folders:
            result.failures[version] = f"version {version} of model '{name}' has no folder"
            continue
        current = (serving or {}).get(version)
        if current is not None and current.config == config:
            result.versions[version] = current  # re-checked above against the members as they are now
            continue
        version_statistics = statistics()
        result.versions[version] = ModelVersion(
            name=name,
            version=version,
            config=config,
            config_json=config_json,
            metadata=model_metadata(config, [version]),
            inputs=tensor_specs(config.input),
            outputs=tensor_specs(config.output, labels),
            scheduler=EnsembleScheduler(name, steps, members, config, version_statistics),
            statistics=version_statistics,
            output_names=_production_order(config, steps),
            required_inputs=tuple(i.name for i in config.input if not i.optional),
            ensemble=True,
            load_duration_s=time.monotonic() - started,
        )


def _labels(
    source: ModelSource, config: mc.ModelConfig, members: EnsembleMembers
) -> dict[str, tuple[str, ...]]:
    """Labels for the classification extension: the ensemble's own label files, else those of the output
    of the composing model that produces the tensor (as Triton looks them up)."""
    labels = read_labels(source.path, config)
    outputs = {o.name for o in config.output}
    for step in config.ensemble_scheduling.step:
        version = "" if step.model_version < 0 else str(step.model_version)
        for model_output, tensor in step.output_map.items():
            if tensor in outputs and tensor not in labels:
                spec = members.lookup(step.model_name, version).outputs.get(model_output)
                if spec is not None and spec.labels:
                    labels[tensor] = spec.labels
    return labels


def _production_order(config: mc.ModelConfig, steps: tuple[EnsembleStep, ...]) -> tuple[str, ...]:
    """The ensemble's outputs in the order Triton answers with them when a request names none, as the
    steps produce them: step by step, each step's in its model's output order."""
    outputs = {o.name for o in config.output}
    ordered = [t for step in steps for t in step.output_map.values() if t in outputs]
    return tuple(ordered + [o.name for o in config.output if o.name not in ordered])


def _fill_defaults(config: mc.ModelConfig) -> None:
    """An ensemble's completed config, as Triton shows it: a version policy, and no instance groups."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    config.model_transaction_policy.SetInParent()  # Triton shows `{"decoupled": false}`


def check_members(config: mc.ModelConfig, members: EnsembleMembers) -> list[mc.ModelConfig]:
    """The steps against the composing models as loaded now: names, versions, maps, types and shapes.
    Returns each step's model config."""
    name = config.name
    found: dict[int, ModelVersion] = {}
    unavailable: list[str] = []
    for index, step in enumerate(config.ensemble_scheduling.step):
        try:
            found[index] = members.lookup(step.model_name, "")
        except NereidError:
            if step.model_name not in unavailable:
                unavailable.append(step.model_name)
    if unavailable:
        raise InvalidArgument(
            f"ensemble {name} contains models that are not available or ambiguous: {', '.join(unavailable)}"
        )
    # Every ensemble tensor's type, dims and full shape (batch dimension included), as each side sees it.
    batch = [-1] if config.max_batch_size > 0 else []
    seen: dict[str, tuple[str, int, list[int], list[int]]] = {}
    checked: list[mc.ModelConfig] = []
    for tensor in list(config.input) + list(config.output):
        # Inside the ensemble a tensor has the shape its `reshape` gives (the request's dims outside).
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        seen[tensor.name] = (name, tensor.data_type, dims, batch + dims)
    for index, step in enumerate(config.ensemble_scheduling.step):
        model = found[index]
        if step.model_version >= 0:
            try:
                model = members.lookup(step.model_name, str(step.model_version))
            except NereidError:
                raise InvalidArgument(
                    f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                    f"{step.model_version} is not loaded."
                ) from None
        member = model.config
        checked.append(member)
        # a batching ensemble may contain non-batching models, as long as the full shapes agree
        if member.max_batch_size != 0 and config.max_batch_size > member.max_batch_size:
            raise InvalidArgument(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it contains model "
                f"{member.name} which only allows maximum batch size to be {member.max_batch_size}"
            )
        member_batch = [-1] if member.max_batch_size > 0 else []
        member_inputs = {i.name: i for i in member.input}
        member_outputs = {o.name: o for o in member.output}
        for model_input, tensor in step.input_map.items():
            if model_input not in member_inputs:
                raise InvalidArgument(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input "
                    f"{model_input} in model {member.name}"
                )
        for model_input in member.input:
            if model_input.name not in step.input_map and not model_input.optional:
                raise InvalidArgument(
                    f"in ensemble {name}, input {model_input.name} in model {member.name} is not mapped to "
                    "any ensemble tensors"
                )
        for model_output, tensor in step.output_map.items():
            if model_output not in member_outputs:
                raise InvalidArgument(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output "
                    f"{model_output} in model {member.name}"
                )
        pairs = [(t, member_inputs[i]) for i, t in step.input_map.items()]
        pairs += [(t, member_outputs[o]) for o, t in step.output_map.items()]
        for tensor, spec in pairs:
            dims = list(spec.dims)
            shape = member_batch + dims
            if tensor not in seen:
                seen[tensor] = (member.name, spec.data_type, dims, shape)
                continue
            other, data_type, other_dims, other_shape = seen[tensor]
            if data_type != spec.data_type:
                raise InvalidArgument(
                    f"in ensemble {name}, ensemble tensor {tensor}: inconsistent data type: "
                    f"{mc.DataType.Name(data_type)} is inferred from model {other} while "
                    f"{mc.DataType.Name(spec.data_type)} is inferred from model {member.name}"
                )
            # As in Triton: the dims may agree, or the full shapes may (a batching model's [d...] beside a
            # non-batching one's [-1, d...]).
            if not _compatible(other_dims, dims) and not _compatible(other_shape, shape):
                raise InvalidArgument(
                    f"in ensemble {name}, ensemble tensor {tensor}: inconsistent shape: "
                    f"{_shape(other_shape)} is inferred from model {other} while {_shape(shape)} is inferred "
                    f"from model {member.name}"
                )
    return checked


def _compatible(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _shape(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def order_for_loading(
    sources: list[ModelSource], settings: ServerSettings
) -> tuple[list[ModelSource], list[ModelSource]]:
    """The sources split into other models and ensembles, the ensembles ordered so that one calling
    another comes after it (those in a cycle come last, and fail for want of each other). With
    namespacing an ensemble name may repeat: a step waits for every ensemble of its model's name."""
    plain: list[ModelSource] = []
    members: dict[str, frozenset[str]] = {}  # by source key
    by_key: dict[str, ModelSource] = {}
    for source in sources:
        found = source_ensemble_members(source, settings)
        if found is None:
            plain.append(source)
        else:
            members[source.key] = found
            by_key[source.key] = source
    ordered: list[ModelSource] = []
    placed: set[str] = set()
    unplaced = Counter(source.name for source in by_key.values())  # ensemble name -> how many to place
    while len(placed) < len(members):
        ready = [k for k in sorted(members) if k not in placed and all(not unplaced[m] for m in members[k])]
        if not ready:  # a cycle: load the rest as they come
            ready = [k for k in sorted(members) if k not in placed]
        for key in ready:
            placed.add(key)
            unplaced[by_key[key].name] -= 1
            ordered.append(by_key[key])
    return plain, ordered


def with_ensemble_members(
    names: list[str], sources: Iterable[ModelSource], settings: ServerSettings
) -> list[str]:
    """`names` and, for the ensembles among them, the models their steps call, transitively (the steps
    of every ensemble of that name, which namespacing allows in several repositories)."""
    by_name: dict[str, list[ModelSource]] = {}
    for source in sources:
        by_name.setdefault(source.name, []).append(source)
    result = list(names)
    index = 0
    while index < len(result):
        for source in by_name.get(result[index], ()):
            members = source_ensemble_members(source, settings)
            result.extend(sorted(m for m in members or () if m not in result))
        index += 1
    return result
