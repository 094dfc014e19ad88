"""Which models are loaded, in what state, and why: the repository as the engine sees it."""

from __future__ import annotations

import enum
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nereid.errors import NotFound, Unavailable
from nereid.repository.loader import LoadResult, load_model
from nereid.repository.model import ModelVersion
from nereid.repository.scan import discover
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
    failures: dict[int | None, str] = field(default_factory=dict)


class ModelManager:
    def __init__(self, settings: ServerSettings) -> None:
        self._settings = settings
        self._models: dict[str, _ModelEntry] = {}
        self._lock = threading.Lock()

    def load_all(self) -> None:
        """Load every model of every repository (model control mode 'none')."""
        for root in self._settings.model_repositories:
            if not root.is_dir():
                raise NotFound(f"model repository '{root}' does not exist or is not a folder")
        sources = discover(list(self._settings.model_repositories))
        workers = max(1, self._settings.model_load_thread_count)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model-load") as pool:
            results = list(pool.map(lambda s: load_model(s, self._settings), sources.values()))
        for result in results:
            self._install(result)

    def _install(self, result: LoadResult) -> None:
        for version, reason in result.failures.items():
            what = f"model '{result.name}'" + (f" version {version}" if version is not None else "")
            log.error("failed to load %s: %s", what, reason)
        with self._lock:
            self._models[result.name] = _ModelEntry(result.name, result.versions, result.failures)

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The version to serve: the asked one, or the highest loaded (Triton's default)."""
        entry = self._models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            try:
                number = int(version)
            except ValueError:
                raise NotFound(
                    f"Request for unknown model: '{name}' version {version} is not found"
                ) from None
            model = entry.versions.get(number)
            if model is None:
                if number in entry.failures:
                    raise Unavailable(
                        f"Request for unknown model: '{name}' version {version} is not at ready state"
                    )
                raise NotFound(f"Request for unknown model: '{name}' version {version} is not found")
            return model
        if not entry.versions:
            raise Unavailable(f"Request for unknown model: '{name}' has no available versions")
        return entry.versions[max(entry.versions)]

    def is_ready(self, name: str, version: str = "") -> bool:
        try:
            self.get(name, version)
        except (NotFound, Unavailable):
            return False
        return True

    def all_ready(self) -> bool:
        """Strict readiness: every model that was asked to load has loaded all its versions."""
        return all(not entry.failures and entry.versions for entry in self._models.values())

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for name in sorted(self._models):
            entry = self._models[name]
            for version in sorted(entry.versions):
                rows.append(
                    {"name": name, "version": str(version), "state": ModelState.READY.value, "reason": ""}
                )
            if ready_only:
                continue
            for failed_version, reason in sorted(entry.failures.items(), key=lambda kv: kv[0] or 0):
                row: dict[str, Any] = {"name": name}
                if failed_version is not None:
                    row["version"] = str(failed_version)
                row.update(state=ModelState.UNAVAILABLE.value, reason=reason)
                rows.append(row)
        return rows

    def model_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows for the start-up table."""
        rows = []
        for row in self.index():
            status = row["state"] if row["state"] == "READY" else f"{row['state']}: {row['reason']}"
            rows.append((row["name"], row.get("version", "-"), status))
        return rows

    def stop(self) -> None:
        with self._lock:
            entries = list(self._models.values())
            self._models.clear()
        for entry in entries:
            for model in entry.versions.values():
                model.stop()
