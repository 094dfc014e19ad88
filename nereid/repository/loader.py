"""Turn a model folder into loaded versions: config, auto-complete, defaults, validation, instances."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import orjson
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import BACKEND_PLATFORMS, InstanceSpec, backend_name, get_backend
from nereid.backends.base import AsyncModelInstance, Backend, ModelInstance
from nereid.core.engine_client import ModelServices
from nereid.custom_metrics import CustomMetrics
from nereid.errors import InvalidArgument, ModelConfigError, NereidError, Unavailable
from nereid.gpus import visible_gpu_count
from nereid.model_config import (
    ConfigSource,
    check_response_cache,
    config_from_json,
    config_to_json,
    read_config,
    validate_config,
)
from nereid.model_config.ensemble import is_ensemble
from nereid.model_config.sequence import check_sequence_batching, fill_sequence_defaults
from nereid.repository.ensemble import load_ensemble
from nereid.repository.instance_budget import InstanceBudget
from nereid.repository.model import ModelVersion, model_metadata, read_labels, tensor_specs
from nereid.repository.scan import (
    ModelSource,
    select_versions,
    shared_files_fingerprint,
    tree_fingerprint,
    version_folders,
)
from nereid.scheduling import create_scheduler
from nereid.scheduling.ensemble import EnsembleMembers
from nereid.scheduling.rate_limiter import Claim, RateLimiter
from nereid.scheduling.warmup import warm_up, warmup_samples
from nereid.settings import ServerSettings
from nereid.statistics import FIRST_RESPONSE_BUCKETS_MS, ModelStatistics

log = logging.getLogger(__name__)


@dataclass
class LoadResult:
    """What loading a model gave: the versions that loaded, and why the others did not."""

    name: str
    versions: dict[int, ModelVersion]
    failures: dict[int | None, str]  # None: the model as a whole failed (config, backend, ...)
    members: frozenset[str] | None = None  # an ensemble's composing models; None: not an ensemble
    withdrawn: tuple[int, ...] = ()  # versions that loaded but were taken down because another failed
    poll_failure: str | None = None  # the folder cannot be read as a model: it is left out, not failed


def load_model(
    source: ModelSource,
    settings: ServerSettings,
    config_override: str | None = None,
    serving: Mapping[int, ModelVersion] | None = None,
    members: EnsembleMembers | None = None,
    limiter: RateLimiter | None = None,
    server: ModelServices | None = None,
    custom_metrics: CustomMetrics | None = None,
    budget: InstanceBudget | None = None,
) -> LoadResult:
    """Load the versions the policy selects. `config_override` is a JSON ModelConfig that replaces
    config.pbtxt; a version in `serving` whose config, files and labels are unchanged is kept as is.
    Ensembles load only given `members`, the composing models they are checked against and call.
    `server` is what the instances' model code calls back into (BLS); `custom_metrics` where its metric
    families go; `budget` the server-wide bound on instances, which each version's instances must fit
    before any of them starts."""
    result = LoadResult(source.name, {}, {})
    if source.duplicate_of is not None:
        # The index gives Triton's reason word for word (clients compare it); the log says where.
        result.failures[None] = "model appears in two or more repositories"
        log.error(
            "model '%s' appears in two model repositories (%s and %s): rename one of them",
            source.name,
            source.path.parent,
            source.duplicate_of.parent,
        )
        return result
    if config_override is not None:
        try:
            _parse_override(source.name, config_override)
        except InvalidArgument as exc:
            # Triton answers a 'config' parameter it cannot read as a poll failure (INTERNAL), and the
            # versions serving keep serving.
            result.poll_failure = exc.message
            return result
    try:
        config, config_source = _source_config(source, settings, config_override)
        if config_source.path is None and config_override is None and not settings.auto_complete_config:
            # Nothing to complete a configuration from: Triton cannot poll such a folder, and leaves it
            # out of the models it serves (and of strict readiness) rather than failing it.
            missing = source.path / "config.pbtxt"
            result.poll_failure = f"failed to open text file for read {missing}: No such file or directory"
            return result
        if members is not None and is_ensemble(config):
            statistics = partial(model_statistics, settings, config)
            load_ensemble(source, config, config_source, members, result, serving, statistics)
            return result
        config, backend, folders = _complete_config(source, config, config_source, settings)
        labels = read_labels(source.path, config)
    except NereidError as exc:
        result.failures[None] = exc.message
        return result
    config_json = config_to_json(config)
    shared = shared_files_fingerprint(source.path, config_source.path)
    wanted = select_versions(config.version_policy, list(folders), source.name)
    if not wanted:
        result.failures[None] = f"model '{source.name}' has no versions to load under its version policy"
    for version in wanted:
        if version not in folders:
            result.failures[version] = f"version {version} of model '{source.name}' has no folder"
            continue
        fingerprint = f"{tree_fingerprint(folders[version])}:{shared}:{sorted(labels.items())}"
        current = (serving or {}).get(version)
        if current is not None and current.fingerprint == fingerprint and _same_model(current.config, config):
            result.versions[version] = current
            continue
        try:
            result.versions[version] = _load_version(
                source,
                config,
                config_json,
                backend,
                folders,
                version,
                labels,
                fingerprint,
                settings,
                limiter,
                server,
                custom_metrics,
                budget,
            )
        except NereidError as exc:
            result.failures[version] = exc.message
        except Exception as exc:  # a backend failing in an unforeseen way fails this version only
            log.exception("loading version %d of model '%s' failed", version, source.name)
            result.failures[version] = f"{type(exc).__name__}: {exc}"
    if result.failures and result.versions:
        _withdraw(result, serving or {})
    loaded = sorted(result.versions)
    for model_version in result.versions.values():
        model_version.metadata["versions"] = [str(v) for v in loaded]
        if model_version.config is not config:  # a kept version shows the version policy now in force
            model_version.config, model_version.config_json = config, config_json
    return result


def _same_model(serving: mc.ModelConfig, wanted: mc.ModelConfig) -> bool:
    """Whether a serving version can go on serving under `wanted`: as in Triton, a config that differs
    only in its version policy (which versions load) changes nothing a version runs with."""
    if serving.version_policy == wanted.version_policy:
        return serving == wanted
    before, after = mc.ModelConfig(), mc.ModelConfig()
    before.CopyFrom(serving)
    after.CopyFrom(wanted)
    before.ClearField("version_policy")
    after.ClearField("version_policy")
    return before == after


def _withdraw(result: LoadResult, serving: Mapping[int, ModelVersion]) -> None:
    """As in Triton, a model serves only when every version its policy names has loaded: the versions
    built by a load where another version failed are stopped again (versions kept from `serving` are not
    ours to stop; the manager decides whether they go on serving)."""
    kept = {id(model) for model in serving.values()}
    for model_version in result.versions.values():
        if id(model_version) not in kept:
            model_version.stop()
    result.withdrawn = tuple(sorted(result.versions))
    result.versions = {}


def _source_config(
    source: ModelSource, settings: ServerSettings, config_override: str | None
) -> tuple[mc.ModelConfig, ConfigSource]:
    if config_override is None:
        return read_config(source.path, settings.model_config_name)
    return _parse_override(source.name, config_override)


def _complete_config(
    source: ModelSource, config: mc.ModelConfig, config_source: ConfigSource, settings: ServerSettings
) -> tuple[mc.ModelConfig, Backend, dict[int, Path]]:
    if not config.name:
        config.name = source.name
    folders = version_folders(source.path)
    name = backend_name(config, source.path, list(folders.values()))
    backend = get_backend(name, settings.backend_directory)
    if not config.backend:
        config.backend = name
    if not config.platform and name in BACKEND_PLATFORMS:
        config.platform = BACKEND_PLATFORMS[name]
    if not config.default_model_filename:
        config.default_model_filename = backend.default_model_filename
    if settings.auto_complete_config and folders:
        # The newest version the policy loads, as Triton completes from a version it loads (not the
        # newest folder, which a specific policy may leave out).
        named = set(config.version_policy.specific.versions) & set(folders)
        latest = folders[max(named) if config.version_policy.HasField("specific") and named else max(folders)]
        backend.auto_complete(config, latest / config.default_model_filename, settings.default_max_batch_size)
    _fill_defaults(config, backend)
    validate_config(config, config_source, source.name)
    check_response_cache(config, config.model_transaction_policy.decoupled)
    check_sequence_batching(config)
    if backend.requires_io and not config.input and not config.output:
        raise ModelConfigError(
            f"model '{source.name}': the configuration has no inputs or outputs, and auto-complete "
            "could not provide them"
        )
    return config, backend, folders


def _parse_override(name: str, text: str) -> tuple[mc.ModelConfig, ConfigSource]:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ModelConfigError(f"model '{name}': the 'config' parameter is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(
            f"model '{name}': the 'config' parameter must be a JSON object (a ModelConfig)"
        )
    config = config_from_json(data)
    if config.name and config.name != name:
        raise ModelConfigError(
            f"model '{name}': the 'config' parameter names the model '{config.name}'; it must be '{name}'"
        )
    return config, ConfigSource(None, text, label="the 'config' parameter of the load request")


# Backends whose CPU instance groups default to two instances, as in Triton.
_TWO_CPU_INSTANCES = ("onnxruntime", "tensorflow")


def _fill_defaults(config: mc.ModelConfig, backend: Backend) -> None:
    """Fields Triton fills in on every loaded config, so /config shows the same values."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if not config.instance_group:  # the default group takes the model's name; listed ones, "<model>_<index>"
        config.instance_group.add(name=config.name, kind=mc.ModelInstanceGroup.KIND_AUTO)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = (
                mc.ModelInstanceGroup.KIND_GPU if backend.gpu_available() else mc.ModelInstanceGroup.KIND_CPU
            )
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus and backend.gpu_available():
            # Triton places a GPU group without `gpus` on every visible GPU, and its config lists them.
            group.gpus.extend(range(visible_gpu_count()) or [0])
        if group.count == 0:
            # Triton's default: two CPU instances for the backends that run well side by side, else one.
            cpu = group.kind == mc.ModelInstanceGroup.KIND_CPU
            group.count = 2 if cpu and backend.name in _TWO_CPU_INSTANCES else 1
    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size:
        if config.max_batch_size > 0:  # Triton prefers full batches unless told otherwise
            config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    fill_sequence_defaults(config)
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def instance_count(config: mc.ModelConfig) -> int:
    """The instances a completed config asks for: each group's count, on each of its GPUs for a GPU group."""
    return sum(
        group.count * (max(1, len(group.gpus)) if group.kind == mc.ModelInstanceGroup.KIND_GPU else 1)
        for group in config.instance_group
    )


def _create_instances(
    backend: Backend, specs: list[InstanceSpec]
) -> list[ModelInstance | AsyncModelInstance]:
    """Start a version's instances side by side, as Triton does: a model whose instances each take long
    to initialize loads in the time of one. Once one fails, those not started yet never start, and those
    that did are closed again."""
    if len(specs) == 1:
        return [backend.create_instance(specs[0])]
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=min(len(specs), 8), thread_name_prefix="instance-start") as pool:
        futures = [pool.submit(backend.create_instance, spec) for spec in specs]
        for future in as_completed(futures):
            failure = future.exception()
            if failure is not None:  # the first failure is the one reported
                for waiting in futures:
                    waiting.cancel()
                break
    instances = [f.result() for f in futures if not f.cancelled() and f.exception() is None]
    if failure is not None:
        for instance in instances:
            instance.close()
        raise failure
    return instances


def model_statistics(settings: ServerSettings, config: mc.ModelConfig) -> ModelStatistics:
    """A version's statistics, with the latency summaries and histograms that --metrics-config asks for."""
    return ModelStatistics(
        summaries=settings.metrics_config.summary_latencies,
        first_response_buckets=first_response_buckets(config)
        if settings.metrics_config.histogram_latencies
        else None,
    )


def first_response_buckets(config: mc.ModelConfig) -> tuple[float, ...]:
    """The buckets of nv_inference_first_response_histogram_ms: the config's `model_metrics` may name
    others, as in Triton."""
    for control in config.model_metrics.metric_control:
        if control.metric_identifier.family == "nv_inference_first_response_histogram_ms":
            return tuple(sorted(set(control.histogram_options.buckets)))
    return FIRST_RESPONSE_BUCKETS_MS


def _load_version(
    source: ModelSource,
    config: mc.ModelConfig,
    config_json: dict,
    backend: Backend,
    folders: dict[int, Path],
    version: int,
    labels: dict[str, tuple[str, ...]],
    fingerprint: str,
    settings: ServerSettings,
    limiter: RateLimiter | None,
    server: ModelServices | None = None,
    custom_metrics: CustomMetrics | None = None,
    budget: InstanceBudget | None = None,
) -> ModelVersion:
    started = time.monotonic()
    version_dir = folders[version]
    model_file = version_dir / config.default_model_filename
    # A backend that names no model file (identity, sequence, Python-based backends) needs none, whatever
    # default_model_filename the config gives (Triton's test models name their C++ libraries there).
    if backend.default_model_filename and not model_file.exists():
        raise Unavailable(
            f"failed to load model '{source.name}' version {version}: model file '{model_file}' not found"
        )
    backend.check(config, model_file)
    samples = warmup_samples(config, source.path)  # a bad warmup setting fails before any instance starts
    backend_config = settings.backend_config.get(backend.name, {})
    # reserved before the specs are even built: a million of them take a minute
    release = (
        budget.reserve(instance_count(config), f"model '{source.name}' version {version}")
        if budget is not None
        else None
    )
    specs: list[InstanceSpec] = []
    claims: list[Claim] = []  # what each instance needs from the rate limiter
    for group in config.instance_group:
        kind = mc.ModelInstanceGroup.Kind.Name(group.kind).removeprefix("KIND_")
        devices = list(group.gpus) or [0]
        per_device = devices if kind == "GPU" else [0]
        for device_id in per_device:
            for index in range(group.count):
                spec = InstanceSpec(
                    model_name=source.name,
                    version=version,
                    config=config,
                    model_dir=source.path,
                    version_dir=version_dir,
                    model_file=model_file,
                    instance_name=f"{group.name}_{index}"
                    if kind != "GPU"
                    else f"{group.name}_{index}_gpu{device_id}",
                    kind=kind,
                    device_id=device_id,
                    backend_config=backend_config,
                    server=server,
                    custom_metrics=custom_metrics,
                )
                specs.append(spec)
                claims.append(Claim.for_group(f"{source.name}:{spec.instance_name}", group, device_id))
    statistics = model_statistics(settings, config)
    try:
        instances = _create_instances(backend, specs)
        label = f"'{source.name}' version {version}"
        try:
            scheduler = create_scheduler(label, config, instances, statistics, source.path, limiter, claims)
        except BaseException:  # the rate limiter refused the instances' resources
            for instance in instances:
                instance.close()
            raise
        try:
            # before the version serves, so before it is READY; counted in its statistics, as Triton does
            warm_up(scheduler.pool, samples, config, statistics)
        except BaseException:
            scheduler.stop()
            raise
    except BaseException:
        if release is not None:
            release()
        raise
    return ModelVersion(
        name=source.name,
        version=version,
        config=config,
        config_json=config_json,
        metadata=model_metadata(config, [version]),
        inputs=tensor_specs(config.input),
        outputs=tensor_specs(config.output, labels),
        scheduler=scheduler,
        statistics=statistics,
        output_names=tuple(o.name for o in config.output),
        required_inputs=tuple(i.name for i in config.input if not i.optional),
        fingerprint=fingerprint,
        load_duration_s=time.monotonic() - started,
        release_instances=release,
    )
