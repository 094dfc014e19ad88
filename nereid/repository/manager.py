"""Which models are loaded, in what state, and why; loading, reloading and unloading them safely.

A reload builds the new versions while the old ones keep serving, swaps them in with one assignment,
then retires what was replaced: retired versions finish the requests they hold before they stop. A
reload that fails leaves the serving versions alone.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nereid.core.engine_client import ModelServices
from nereid.custom_metrics import CustomMetrics
from nereid.errors import InvalidArgument, NereidError, NotFound, PollFailed, Unavailable
from nereid.log_settings import verbose
from nereid.repository.ensemble import order_for_loading, source_ensemble_members, with_ensemble_members
from nereid.repository.instance_budget import InstanceBudget, default_max_instances
from nereid.repository.loader import LoadResult, load_model
from nereid.repository.model import ModelVersion
from nereid.repository.remote import RepositoryMirror
from nereid.repository.scan import ModelSource, discover, model_key, tree_fingerprint
from nereid.repository.uploads import check_model_name, remove_model_folder, write_model_folder
from nereid.scheduling.ensemble import EnsembleMembers
from nereid.scheduling.rate_limiter import RateLimiter
from nereid.settings import ServerSettings

log = logging.getLogger(__name__)


class ModelState(enum.Enum):
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass
class _ModelEntry:
    name: str
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    failures: dict[int | None, str] = field(default_factory=dict)  # None: the model as a whole
    unloaded: tuple[int, ...] = ()  # versions taken down by an unload
    uploaded: Path | None = None  # the private folder of a model delivered through the load API


_VERSION = re.compile(r"\s*([+-]?[0-9]+)")
_INT64_MAX = 2**63 - 1


def version_number(version: str) -> int:
    """A requested version string as a number, read as Triton reads it (C++ `stol`: a leading integer)."""
    match = _VERSION.match(version)
    if match is None or abs(int(match.group(1))) > _INT64_MAX:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )
    number = int(match.group(1))
    if number < 0:
        raise InvalidArgument(
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return number


class ModelManager:
    def __init__(self, settings: ServerSettings, environ: Mapping[str, str] | None = None) -> None:
        """`environ` holds the cloud credentials of remote repositories (the process environment if None)."""
        self._settings = settings
        environ = os.environ if environ is None else environ
        self._mirrors = [RepositoryMirror(url, environ) for url in settings.remote_repositories]
        self._models: dict[str, _ModelEntry] = {}
        self._transitions: dict[str, ModelState] = {}  # LOADING / UNLOADING while one runs
        self._locks: dict[str, threading.Lock] = {}  # one load or unload at a time per model
        self._locks_guard = threading.Lock()
        # Models that an ensemble being loaded calls: how many such loads hold each one.
        self._pinned: Counter[str] = Counter()
        self._pins_changed = threading.Condition()
        self._polled: dict[str, str] = {}  # poll mode: the folder fingerprint last acted on
        self._stopping = threading.Event()
        self._poller: threading.Thread | None = None
        # What model code calls back into (ensemble steps, BLS), given to `start`; None: nothing (models
        # load, but ensembles and BLS calls fail).
        self._server: ModelServices | None = None
        # The metric families model code creates (pb_utils.MetricFamily), exported on /metrics.
        self.custom_metrics = CustomMetrics()
        # Ensembles reach their composing models through this.
        self.members = EnsembleMembers(self.get)
        self._ensembles: dict[str, frozenset[str]] = {}  # ensemble -> the models its steps call
        self._cascaded: set[str] = set()  # ensembles unloaded because a composing model was
        # the 'config' a model was last loaded with (and when), until unloaded
        self._overrides: dict[str, tuple[str, float]] = {}
        self._chain = threading.local()  # models this thread is loading or unloading (no recursion)
        # One for every model, so that resources are shared across models (--rate-limit).
        self._limiter = RateLimiter(settings.rate_limit_resources) if settings.rate_limit else None
        self.instances = InstanceBudget(settings.max_model_instances or default_max_instances())

    @property
    def control_mode(self) -> str:
        return self._settings.model_control_mode

    # start-up and shutdown
    def start(self, server: ModelServices | None = None) -> None:
        """Load what the control mode loads at start-up; in poll mode, start watching the repositories.
        `server` (the engine) is what the models loaded now and later call back into: ensembles run their
        steps as its requests, Python models send it their BLS requests."""
        self._server = server
        self.members = EnsembleMembers(self.get, server)
        for root in self._settings.model_repositories:
            if not root.is_dir():
                raise RepositoryMissing(f"model repository '{root}' does not exist or is not a folder")
        for mirror in self._mirrors:
            mirror.sync()
        if self.control_mode == "explicit":
            self._load_at_start(self._settings.load_models)
        else:
            self.load_all()
        if self.control_mode == "poll":
            self._poller = threading.Thread(target=self._poll_loop, name="repository-poll", daemon=True)
            self._poller.start()

    def load_all(self) -> None:
        """Load every model of every repository, several at a time."""
        sources = self._discover()
        self._load_sources(list(sources.values()))

    def _discover(self) -> dict[str, ModelSource]:
        """Models of the local roots and of the mirrors; a mirrored model by its download folder, so that
        its versions keep reading the files they loaded from when a newer download is swapped in."""
        mirrors = {mirror.root for mirror in self._mirrors}
        sources = discover([*self._settings.model_repositories, *mirrors], self._settings.model_namespacing)
        return {
            key: replace(source, path=source.path.resolve()) if source.path.parent in mirrors else source
            for key, source in sources.items()
        }

    def _discover_named(self, name: str) -> list[ModelSource]:
        """The folders of the model `name`: one, or with namespacing one per repository that has it."""
        return [source for source in self._discover().values() if source.name == name]

    def _load_at_start(self, names: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(names))
        if "*" in wanted:
            self.load_all()
            return
        sources = self._discover()
        wanted = with_ensemble_members(wanted, sources.values(), self._settings)  # Triton loads them too
        named: dict[str, list[ModelSource]] = {}
        for source in sources.values():
            named.setdefault(source.name, []).append(source)
        for name in wanted:
            if name not in named:
                self._models[name] = _ModelEntry(name, failures={None: _no_folder(name)})
                log.error(
                    "failed to load '%s': model not found in any model repository (%s)",
                    name,
                    _no_folder(name),
                )
        self._load_sources([source for name in wanted for source in named.get(name, ())])

    def _load_sources(self, sources: list[ModelSource]) -> None:
        # As Triton does: ensembles after every other model, one at a time, each after those it calls.
        plain, ensembles = order_for_loading(sources, self._settings)
        workers = max(1, self._settings.model_load_thread_count)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model-load") as pool:
            results = list(pool.map(lambda s: (s, self._load_model(s)), plain))
        for source, result in results:
            self._register_loaded(source, result)
        for source in ensembles:
            self._register_loaded(source, self._load_model(source, members=self._members_for(source)))

    def _load_model(
        self,
        source: ModelSource,
        config: str | None = None,
        serving: dict[int, ModelVersion] | None = None,
        members: EnsembleMembers | None = None,
    ) -> LoadResult:
        retries = self._settings.model_load_retry_count  # --model-load-retry-count
        while True:
            result = load_model(
                source,
                self._settings,
                config,
                serving,
                members,
                limiter=self._limiter,
                server=self._server,
                custom_metrics=self.custom_metrics,
                budget=self.instances,
            )
            if not result.failures or source.duplicate_of is not None or retries <= 0:
                break
            retries -= 1
            _log_failures(result)
            log.info("loading model '%s' again (%d more tries after this one)", source.name, retries)
        for mirror in self._mirrors:  # reasons name the model's place in the bucket, not the local copy
            remote = mirror.remote_path(source.path)
            if remote is not None:
                local = str(source.path)
                result.failures = {v: reason.replace(local, remote) for v, reason in result.failures.items()}
        return result

    def _register_loaded(self, source: ModelSource, result: LoadResult) -> None:
        if result.poll_failure is not None:
            log.error(
                "failed to poll model '%s' from the model repository: %s", result.name, result.poll_failure
            )
            self._polled[source.key] = _poll_fingerprint(source)
            return
        _log_failures(result)
        if not result.failures:
            _log_loaded(result.name)
        self._models[source.key] = _ModelEntry(
            result.name, result.versions, result.failures, result.withdrawn
        )
        self._polled[source.key] = _poll_fingerprint(source)
        if result.members is not None:
            self._ensembles[source.key] = result.members

    def stop(self) -> None:
        self._stopping.set()
        if self._poller is not None:
            self._poller.join()
        # Loads under way end first (as in Triton), so that what they loaded is unloaded with the rest.
        with self._locks_guard:
            locks = list(self._locks.values())
        for lock in locks:
            with lock:
                pass
        entries = list(self._models.values())
        self._models.clear()
        for entry in entries:
            if entry.versions:
                _log_step("AsyncUnload", entry.name, "unloading at shutdown")
            for model in entry.versions.values():
                model.stop()
            if entry.uploaded is not None:
                remove_model_folder(entry.uploaded)
        for mirror in self._mirrors:
            mirror.close()

    # load and unload (blocking: call from a worker thread, never from the event loop)
    def load(self, name: str, config: str | None = None, files: dict[str, bytes] | None = None) -> None:
        """Load or reload `name`; raises with the reason when it fails, the serving versions untouched.
        An ensemble's composing models load first where not loaded yet (explicit mode), and the ensembles
        that call `name` reload after it, so that they are checked against it as it is now."""
        try:
            check_model_name(name)
            chain = self._chain_set()
            if name in chain:
                return
            chain.add(name)
            members = self._members_to_load_first(name, files)
            # An unload of a composing model waits until the ensemble that loads it has loaded (as in
            # Triton), and then takes the ensemble down with it, rather than pulling the model from under
            # the load.
            self._pin(members)
            try:
                for member in members:
                    self._load_member(member)
                self._load(name, config, files)
            finally:
                self._unpin(members)
                self._reload_dependents(name)
                chain.discard(name)
        except NereidError as exc:
            _open_with_failed_to_load(name, exc)
            raise

    def _load(self, name: str, config: str | None, files: dict[str, bytes] | None) -> None:
        if files and config is None:
            raise PollFailed(
                name, "file parameters need a 'config' parameter too (the model's configuration as JSON)"
            )
        with self._model_lock(name):  # one lock per name: with namespacing, for all its repositories
            try:
                if files:
                    uploaded = write_model_folder(name, files)
                    self._load_source(ModelSource(name, uploaded), config, uploaded)
                    return
                failed: NereidError | None = None
                for source in self._repository_sources(name):  # namespacing: each repository's model `name`
                    try:
                        self._load_source(source, config, None)
                    except NereidError as exc:
                        failed = failed or exc
                if failed is not None:
                    raise failed
            finally:
                _log_step("OnLoadFinal", name, "the load has ended")

    def _load_source(self, source: ModelSource, config: str | None, uploaded: Path | None) -> None:
        """Load or reload one model folder: one in a repository, or the private one of an upload."""
        name, key, files = source.name, source.key, uploaded is not None
        if config is None and not files:
            # As in Triton, a configuration given once stays until unloaded, or until the model's own
            # config.pbtxt is written after it.
            kept = self._overrides.get(key)
            if kept is not None and not _written_since(source.path / "config.pbtxt", kept[1]):
                config = kept[0]
        if source.duplicate_of is not None:  # explicit mode: the versions serving now keep serving
            raise PollFailed(name, "model appears in two or more repositories")
        current = self._models.get(key)
        # Versions can be kept through a reload only if their files stay where they are.
        reusable = current.versions if current is not None and current.uploaded == uploaded else None
        self._transitions[key] = ModelState.LOADING
        try:
            result = self._load_model(source, config, reusable, self._members_for(source))
        except BaseException:
            if uploaded is not None:
                remove_model_folder(uploaded)
            raise
        finally:
            del self._transitions[key]
        if result.poll_failure is not None:
            raise PollFailed(name, result.poll_failure)
        _log_failures(result)
        # An ensemble failing its checks against members as they are now cannot keep serving either.
        keep_serving = result.members is None or None not in result.failures
        if result.failures and current is not None and current.versions and keep_serving:
            self._discard(result, keep=current.versions.values())
            if uploaded is not None:
                remove_model_folder(uploaded)
            raise InvalidArgument(_load_failed(name, result) + "; the versions already loaded keep serving")
        # Versions served before and not now stay known as unloaded, as in Triton ("not at ready state").
        earlier = set(current.versions) | set(current.unloaded) if current is not None else set()
        unloaded = (earlier | set(result.withdrawn)) - set(result.versions) - set(result.failures)
        self._models[key] = _ModelEntry(
            name, result.versions, result.failures, tuple(sorted(unloaded)), uploaded=uploaded
        )
        self._cascaded.discard(name)
        if result.members is not None:
            self._ensembles[key] = result.members
        if current is not None:
            self._retire(current, keep=result.versions.values())
        if result.failures:
            raise InvalidArgument(_load_failed(name, result))
        _log_loaded(name)
        if config is not None and not files:
            self._overrides[key] = (config, time.time())

    def unload(self, name: str, unload_dependents: bool = False, keys: Iterable[str] | None = None) -> None:
        """Stop serving `name` once the requests it holds are answered. Unknown names are not an error.
        Ensembles that call it are unloaded too, and come back when it loads again (as in Triton). With
        `unload_dependents`, an ensemble's composing models go too, unless another ensemble calls them.
        `keys`: only those of its folders (with namespacing, the one removed from its repository)."""
        chain = self._chain_set()
        if name in chain:
            return
        chain.add(name)
        self._cascaded.discard(name)  # unloaded on purpose: it does not come back with its members
        try:
            keys = self._unload(name, keys)
            for ensemble in self._dependents(name):
                entry = self._models.get(ensemble)
                if entry is not None and entry.versions:
                    self.unload(entry.name, keys=[ensemble])
                    self._cascaded.add(entry.name)
            if unload_dependents:
                for member in sorted({m for key in keys for m in self._ensembles.get(key, ())}):
                    if not any(self._serving(e) for e in self._dependents(member)):
                        self.unload(member, unload_dependents=True)
        finally:
            chain.discard(name)

    def _serving(self, key: str) -> bool:
        """Whether the model known by `key` has versions serving."""
        entry = self._models.get(key)
        return entry is not None and bool(entry.versions)

    def _unload(self, name: str, keys: Iterable[str] | None) -> list[str]:
        """Unload the folders `keys` of `name` (all of them if None); returns the keys it looked at."""
        self._wait_unpinned(name)
        with self._model_lock(name):
            keys = self._keys(name) if keys is None else list(keys)
            for key in keys:
                self._overrides.pop(key, None)
                current = self._models.get(key)
                if current is None or not current.versions:
                    continue
                self._transitions[key] = ModelState.UNLOADING
                _log_step("AsyncUnload", name, "unloading")
                try:
                    self._models[key] = _ModelEntry(name, unloaded=tuple(sorted(current.versions)))
                    self._retire(current, keep=())
                finally:
                    del self._transitions[key]
        return keys

    def _keys(self, name: str) -> list[str]:
        """The keys of the known models named `name`: with namespacing, one per repository that has it."""
        if not self._settings.model_namespacing:
            return [name] if name in self._models else []
        return sorted(key for key, entry in list(self._models.items()) if entry.name == name)

    # ensembles and the models they call
    def _chain_set(self) -> set[str]:
        chain: set[str] | None = getattr(self._chain, "names", None)
        if chain is None:
            chain = self._chain.names = set()
        return chain

    def _dependents(self, name: str) -> list[str]:
        """The keys of the ensembles whose steps call a model named `name` (in any repository)."""
        return sorted(
            e for e, members in list(self._ensembles.items()) if name in members and self._name_of(e) != name
        )

    def _name_of(self, key: str) -> str:
        entry = self._models.get(key)
        return entry.name if entry is not None else key

    def _members_to_load_first(self, name: str, files: dict[str, bytes] | None) -> list[str]:
        """An ensemble's composing models, which explicit mode loads with it; none otherwise."""
        if self.control_mode != "explicit" or files:
            return []
        members: set[str] = set()
        for source in self._discover_named(name):
            members.update(source_ensemble_members(source, self._settings) or ())
        return sorted(members)

    def _members_for(self, source: ModelSource) -> EnsembleMembers:
        """What an ensemble in `source` calls: with namespacing, its steps prefer its own repository."""
        if not source.namespace:
            return self.members
        lookup = functools.partial(self.get, namespace=source.namespace)
        return EnsembleMembers(lookup, self._server, source.namespace)

    def _load_member(self, member: str) -> None:
        loaded = {key for key in self._keys(member) if self._serving(key)}
        if loaded and (
            not self._settings.model_namespacing
            or all(source.key in loaded for source in self._discover_named(member))
        ):
            return  # with namespacing: loaded from every repository that has it
        try:
            self.load(member)
        except (InvalidArgument, NotFound, Unavailable, PollFailed):
            pass  # logged; the ensemble then fails naming the model it lacks

    def _own_pins(self) -> Counter[str]:
        pins: Counter[str] | None = getattr(self._chain, "pins", None)
        if pins is None:
            pins = self._chain.pins = Counter()
        return pins

    def _pin(self, names: list[str]) -> None:
        self._own_pins().update(names)
        with self._pins_changed:
            self._pinned.update(names)

    def _unpin(self, names: list[str]) -> None:
        self._own_pins().subtract(names)
        with self._pins_changed:
            self._pinned.subtract(names)
            self._pins_changed.notify_all()

    def _wait_unpinned(self, name: str) -> None:
        own = self._own_pins()[name]  # this thread's own loads never wait for themselves
        with self._pins_changed:
            self._pins_changed.wait_for(lambda: self._pinned[name] <= own)

    def _reload_dependents(self, name: str) -> None:
        for key in self._dependents(name):
            entry = self._models.get(key)
            if entry is None or not (entry.versions or entry.failures or entry.name in self._cascaded):
                continue  # unloaded on purpose, or never asked for
            ensemble = entry.name
            if ensemble in self._chain_set():
                continue
            try:
                self.load(ensemble)
            except (InvalidArgument, NotFound, Unavailable, PollFailed):
                pass  # logged, and shown in the repository index

    def _repository_sources(self, name: str) -> list[ModelSource]:
        """The folders of `name` as they are now: one, or with namespacing one per repository."""
        for mirror in self._mirrors:  # as Triton: a load reads the model from the bucket as it is now
            mirror.sync(only=name)
        sources = self._discover_named(name)
        if not sources:
            raise PollFailed(name, _no_folder(name))
        return sources

    def _retire(self, entry: _ModelEntry, keep: Iterable[ModelVersion]) -> None:
        kept = {id(model) for model in keep}
        for model in entry.versions.values():
            if id(model) not in kept:
                model.retire(float(self._settings.exit_timeout_secs))
        if entry.uploaded is not None:
            remove_model_folder(entry.uploaded)

    @staticmethod
    def _discard(result: LoadResult, keep: Iterable[ModelVersion]) -> None:
        """Stop versions a failed reload built but will not serve (never ones still serving)."""
        kept = {id(model) for model in keep}
        for model in result.versions.values():
            if id(model) not in kept:
                model.stop()

    def _model_lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    # poll mode
    def _poll_loop(self) -> None:
        while not self._stopping.wait(self._settings.repository_poll_secs):
            try:
                self.poll()
            except Exception:  # one bad poll must not end polling
                log.exception("polling the model repository failed")

    def poll(self) -> None:
        """Apply what changed on disk since the last look: new, changed and removed models."""
        for mirror in self._mirrors:
            try:
                mirror.sync(settle=True)
            except NereidError as exc:  # the bucket cannot be read now: keep serving what was mirrored
                log.error("cannot poll %s: %s", mirror.url, exc.message)
        sources = self._discover()
        for key, source in sources.items():
            if self._stopping.is_set():
                return
            fingerprint = _poll_fingerprint(source)
            if self._polled.get(key) == fingerprint:
                continue
            # Remember the attempt even if it fails: a half-written folder changes again when complete.
            self._polled[key] = fingerprint
            if source.duplicate_of is not None:
                self._take_down_duplicate(source.name)
                continue
            log.info("model '%s' changed on disk: loading it", source.name)
            try:
                self.load(source.name)
            except (InvalidArgument, NotFound, Unavailable, PollFailed) as exc:
                log.error("%s", exc.message)
        for key in [k for k in self._models if k not in sources]:
            entry = self._models.get(key)
            if entry is None or entry.uploaded is not None:
                continue
            self._polled.pop(key, None)
            if entry.versions:
                log.info("model '%s' was removed from the repository: unloading it", entry.name)
                self.unload(entry.name, keys=[key])
                if self._settings.model_namespacing:  # the ensembles it served may call a namesake now
                    self._reload_dependents(entry.name)
            elif not entry.unloaded:  # an unloaded model stays known, as in Triton: "no available versions"
                self._models.pop(key, None)

    def _take_down_duplicate(self, name: str) -> None:
        """Poll mode: a model that now appears in a second repository stops serving, as in Triton, which
        cannot poll it any more: like a removed model, it does not count against strict readiness."""
        log.error("failed to load '%s': model appears in two or more repositories", name)
        self.unload(name)

    # lookups for the serving path
    def get(self, name: str, version: str = "", namespace: str = "") -> ModelVersion:
        """The version to serve: the asked one, or the highest loaded (Triton's default). `namespace`: the
        repository whose model of that name an ensemble step prefers (--model-namespacing)."""
        if self._settings.model_namespacing:
            key, entry = self._find(name, namespace)
        else:  # what `_find` answers then, without its call on every request
            key, entry = name, self._models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            number = version_number(version)
            model = entry.versions.get(number)
            if model is None:
                if number in entry.failures or number in entry.unloaded:
                    raise Unavailable(
                        f"Request for unknown model: '{name}' version {number} is not at ready state"
                    )
                raise NotFound(f"Request for unknown model: '{name}' version {number} is not found")
            return model
        versions = entry.versions
        if not versions:
            if None in entry.failures and key in self._ensembles:
                # Triton never registers an ensemble that fails its checks (the index gives the reason).
                raise NotFound(f"Request for unknown model: '{name}' is not found")
            raise NotFound(f"Request for unknown model: '{name}' has no available versions")
        if len(versions) == 1:  # the usual case, without max() on every request
            (model,) = versions.values()
            return model
        return versions[max(versions)]

    def _find(self, name: str, namespace: str = "") -> tuple[str, _ModelEntry | None]:
        """The model a request names, and its key. With namespacing a name served from several
        repositories is refused as ambiguous (Triton's words), unless `namespace` has it."""
        if not self._settings.model_namespacing:
            return name, self._models.get(name)
        if namespace:
            key = model_key(namespace, name)
            preferred = self._models.get(key)
            if preferred is not None and (preferred.versions or preferred.failures):
                return key, preferred
        named = sorted((key, entry) for key, entry in list(self._models.items()) if entry.name == name)
        # One unloaded, or removed from its repository, does not make the name ambiguous.
        live = [(key, entry) for key, entry in named if entry.versions or entry.failures]
        if len(live) > 1:
            raise InvalidArgument(
                f"There are {len(live)} identifiers of model '{name}' in global map, model namespace must "
                "be provided to resolve ambiguity."
            )
        if not named:
            return name, None
        return (live or named)[0]

    def loaded(self, name: str | None = None) -> list[ModelVersion]:
        """Serving versions of every model (or of `name`, which must exist), by name then version."""
        if name is not None:
            _, entry = self._find(name)
            if entry is None or not entry.versions:
                raise InvalidArgument(f"requested model '{name}' is not available")
            return [entry.versions[v] for v in sorted(entry.versions)]
        entries = sorted(list(self._models.items()), key=lambda item: (item[1].name, item[0]))
        return [e.versions[v] for _, e in entries for v in sorted(e.versions)]

    def get_for_statistics(self, name: str, version: str) -> ModelVersion:
        """One version for the statistics extension, refused with Triton's texts."""
        versions = {str(m.version): m for m in self.loaded(name)}
        model = versions.get(version)
        if model is None:
            raise InvalidArgument(f"requested model version is not available for model '{name}'")
        return model

    def is_ready(self, name: str, version: str = "") -> bool:
        try:
            model = self.get(name, version)
        except (NotFound, Unavailable):
            return False
        return model.unavailable_reason() is None

    def all_ready(self) -> bool:
        """Strict readiness: every model that was asked to load has loaded all its versions, and can serve."""
        return all(
            not entry.failures
            and (entry.versions or entry.unloaded)
            and all(v.unavailable_reason() is None for v in entry.versions.values())
            for entry in list(self._models.values())
        )

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Repository index rows as Triton writes them: READY rows carry no reason."""
        # by key: with namespacing a name has a row for each repository that has it
        names = {key: entry.name for key, entry in list(self._models.items())}
        if not ready_only:
            names.update({key: s.name for key, s in self._discover().items() if key not in names})
        rows: list[dict[str, Any]] = []
        for key, name in sorted(names.items(), key=lambda item: (item[1], item[0])):
            entry = self._models.get(key)
            transition = self._transitions.get(key)
            if entry is None or (transition is ModelState.LOADING and not entry.versions):
                if transition is not None:
                    rows.append({"name": name, "state": transition.value})
                elif not ready_only:
                    rows.append({"name": name})
                continue
            # Versions serving through a reload stay READY.
            for version in sorted(entry.versions):
                reason = entry.versions[version].unavailable_reason()
                if reason is None:
                    rows.append({"name": name, "version": str(version), "state": ModelState.READY.value})
                elif not ready_only:  # loaded, but cannot serve now (a Python worker restarting, say)
                    rows.append(
                        {"name": name, "version": str(version), "state": "UNAVAILABLE", "reason": reason}
                    )
            if ready_only:
                continue
            for version in entry.unloaded:
                if transition is ModelState.UNLOADING:  # still answering the requests it holds
                    rows.append({"name": name, "version": str(version), "state": transition.value})
                else:
                    rows.append(
                        {"name": name, "version": str(version), "state": "UNAVAILABLE", "reason": "unloaded"}
                    )
            for failed, reason in sorted(entry.failures.items(), key=lambda kv: kv[0] or 0):
                row: dict[str, Any] = {"name": name}
                if failed is not None:
                    row["version"] = str(failed)
                row.update(state=ModelState.UNAVAILABLE.value, reason=reason)
                rows.append(row)
        return rows

    def model_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows for the start-up table: the models that were asked to load."""
        rows = []
        for row in self.index():
            if "state" not in row:
                continue
            status = (
                row["state"] if row["state"] == "READY" else f"{row['state']}: {_first_line(row['reason'])}"
            )
            rows.append((row["name"], row.get("version", "-"), status))
        return rows


def _first_line(reason: str) -> str:
    """A table cell holds one line: a reason with a traceback keeps its first, and the error logged at the
    failure has the rest."""
    first, newline, _ = reason.strip().partition("\n")
    return f"{first} (traceback in the log above)" if newline else first


class RepositoryMissing(NotFound):
    """A --model-repository folder does not exist: the server cannot initialize."""


def _written_since(path: Path, moment: float) -> bool:
    try:
        return path.stat().st_mtime > moment
    except OSError:
        return False


def _poll_fingerprint(source: ModelSource) -> str:
    """What poll mode compares: the folder's files, and whether a second repository has the name too."""
    fingerprint = tree_fingerprint(source.path)
    return fingerprint if source.duplicate_of is None else f"{fingerprint}:duplicate"


def _no_folder(name: str) -> str:
    return f"no model folder named '{name}' in the model repository"


def _log_failures(result: LoadResult) -> None:
    # Triton's wording ("failed to load 'm' version 2: ..."), which tools look for in the log.
    for version, reason in result.failures.items():
        what = f"'{result.name}'" + (f" version {version}" if version is not None else "")
        log.error("failed to load %s: %s", what, reason)


def _open_with_failed_to_load(name: str, exc: NereidError) -> None:
    """Every load failure opens with Triton's "failed to load '<model>', ", which clients match on (Triton's
    model-control examples among them), and goes on with the precise reason."""
    opening = f"failed to load '{name}', "
    if not exc.message.startswith(opening):
        exc.message = opening + exc.message
        exc.args = (exc.message,)


def _load_failed(name: str, result: LoadResult) -> str:
    # Triton's words for a failed version ("version 2 is at UNAVAILABLE state: ..."), which clients match.
    reasons = "; ".join(
        (f"version {version} is at UNAVAILABLE state: " if version is not None else "") + reason
        for version, reason in sorted(result.failures.items(), key=lambda kv: kv[0] or 0)
    )
    # load() opens it with "failed to load '<model>', " as well: Triton's lifecycle tests match this one.
    return f"load failed for model '{name}': {reasons}"


def _log_step(step: str, name: str, what: str) -> None:
    """Verbose (level 2) marks of a model's load ending and its unload starting. Triton's verbose log
    names these steps after its own functions, and tools check their order by those names."""
    log.log(verbose(2), "%s() '%s': %s", step, name, what)


def _log_loaded(name: str) -> None:
    """Once per load that ended with every version it asked for serving (versions it kept count): the
    line Triton's logs carry and its tests count."""
    log.info("successfully loaded '%s'", name)
