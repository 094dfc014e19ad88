"""A local mirror of a remote model repository, which the rest of the server reads as a folder.

Each model is downloaded into a fresh folder of its own and swapped in with one atomic rename of a link,
so a reader sees the old model or the new one, never a mix. A model is swapped in only when every object
downloaded is the version that was listed and a second listing after the downloads matches the first;
otherwise it is still being uploaded, and the next sync tries again. Polling also waits until a changed
model lists the same twice in a row before it downloads it, so an upload in progress is not picked up
half-way.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from nereid.errors import InvalidArgument, NereidError, Unavailable
from nereid.repository.remote.location import parse_location
from nereid.repository.remote.stores import ObjectChanged, ObjectInfo, ObjectStore, open_store

log = logging.getLogger(__name__)

# Where Triton copies each provider's repositories when told to; a temporary folder otherwise.
MOUNT_DIRECTORY = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}
KEEP_GENERATIONS = 2  # the folder a model serves from, and the one before it (versions still draining)


def _fingerprint(objects: list[ObjectInfo]) -> str:
    digest = hashlib.sha1()
    for obj in sorted(objects, key=lambda o: o.key):
        digest.update(f"{obj.key}\0{obj.size}\0{obj.tag}\n".encode())
    return digest.hexdigest()


class RepositoryMirror:
    """The models of one remote repository, mirrored under `root` (one entry per model)."""

    def __init__(self, url: str, environ: Mapping[str, str]) -> None:
        self.location = parse_location(url)
        self._environ = dict(environ)
        self._store: ObjectStore | None = None  # opened at the first sync, so the client loads only then
        mount = self._environ.get(MOUNT_DIRECTORY[self.location.scheme], "")
        self._owned = not mount
        slug = hashlib.sha1(url.encode()).hexdigest()[:12]
        base = Path(tempfile.mkdtemp(prefix="nereid-repository-")) if self._owned else Path(mount) / slug
        self._base = base
        if not self._owned:  # ours alone: what an earlier run left there is stale
            shutil.rmtree(base, ignore_errors=True)
        self.root = base / "repository"
        self._generations = base / "generations"
        self.root.mkdir(parents=True, exist_ok=True)
        self._generations.mkdir(exist_ok=True)
        self._generations = self._generations.resolve()  # model folders are known by their resolved paths
        self._mirrored: dict[str, str] = {}  # model -> fingerprint of the objects in its folder
        self._pending: dict[str, str] = {}  # model -> fingerprint seen changed once (polling)
        self._downloads = 0  # numbers download folders, so that the newest sort last
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.location.url

    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.location, self._environ)
        return self._store

    def sync(self, only: str | None = None, settle: bool = False) -> None:
        """Bring the mirror up to date with the bucket (every model, or `only` that one). Listing errors
        raise; a model that fails to download keeps its current folder, and raises when it was `only`."""
        with self._lock:
            base = self.location.key("")  # "" or "<path>/"
            models: dict[str, list[ObjectInfo]] = {}
            for obj in self.store().list(base + (f"{only}/" if only else "")):
                name, slash, _ = obj.key[len(base) :].partition("/")
                if slash and name and not name.startswith("."):
                    models.setdefault(name, []).append(obj)
            for name in sorted(models):
                self._sync_model(name, models[name], settle, raise_errors=only is not None)
            for name in [n for n in self._mirrored if n not in models and (only is None or n == only)]:
                log.info("model '%s' was removed from %s", name, self.url)
                (self.root / name).unlink(missing_ok=True)
                self._mirrored.pop(name)
                self._collect(name, keep=0)

    def _sync_model(self, name: str, objects: list[ObjectInfo], settle: bool, raise_errors: bool) -> None:
        fingerprint = _fingerprint(objects)
        if self._mirrored.get(name) == fingerprint:
            self._pending.pop(name, None)
            return
        if settle and self._pending.get(name) != fingerprint:
            self._pending[name] = fingerprint  # changed since the last look: wait until it holds still
            return
        try:
            folder = self._download(name, objects)
        except ObjectChanged as changed:
            self._pending.pop(name, None)
            log.info("model '%s' in %s is still changing (%s): trying again later", name, self.url, changed)
            if raise_errors:
                raise Unavailable(
                    f"model '{name}' in {self.url} changed while it was being downloaded; try again"
                ) from None
            return
        except NereidError as exc:
            if raise_errors:
                raise
            log.error("cannot download model '%s' from %s: %s", name, self.url, exc.message)
            return
        link = self.root / f".{name}.swap"
        link.unlink(missing_ok=True)
        link.symlink_to(folder, target_is_directory=True)
        os.replace(link, self.root / name)  # atomic: readers see the old folder or the new one
        self._mirrored[name] = fingerprint
        self._pending.pop(name, None)
        self._collect(name, keep=KEEP_GENERATIONS)

    def _download(self, name: str, objects: list[ObjectInfo]) -> Path:
        generations = self._generations / name
        generations.mkdir(exist_ok=True)
        self._downloads += 1
        folder = Path(tempfile.mkdtemp(prefix=f"{self._downloads:08d}-", dir=generations))
        model_prefix = self.location.key(f"{name}/")
        try:
            for obj in objects:
                relative = obj.key[len(model_prefix) :]
                if not relative:  # the model folder's own marker
                    continue
                parts = PurePosixPath(relative).parts
                if any(part in ("", ".", "..") for part in relative.rstrip("/").split("/")) or not parts:
                    log.warning(
                        "ignoring %s: not a path inside the model folder", self.location.describe(obj.key)
                    )
                    continue
                target = folder.joinpath(name, *parts)
                try:
                    if relative.endswith("/"):  # a folder marker
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.store().download(obj, target)
                except OSError as exc:  # a key that is both a file and a folder, a full disk, ...
                    raise InvalidArgument(
                        f"cannot copy {self.location.describe(obj.key)} into the local mirror: {exc}"
                    ) from None
            # Objects added or removed while we downloaded: the listing no longer matches.
            if _fingerprint(self.store().list(model_prefix)) != _fingerprint(objects):
                raise ObjectChanged(f"the objects under {self.location.describe(model_prefix)} changed")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder / name

    def _collect(self, name: str, keep: int) -> None:
        """Remove the model's older download folders, keeping the `keep` newest."""
        generations = self._generations / name
        folders = sorted(generations.iterdir()) if generations.is_dir() else []
        for folder in folders[: max(0, len(folders) - keep)]:
            shutil.rmtree(folder, ignore_errors=True)

    def remote_path(self, local: Path) -> str | None:
        """The bucket URL of a model folder of this mirror (None if `local` is not one)."""
        try:
            name = local.relative_to(self._generations).parts[0]
        except (ValueError, IndexError):
            return None
        return self.location.describe(self.location.key(name))

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self._base, ignore_errors=True)
