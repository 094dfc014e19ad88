"""Find models and their version folders under one or more repository roots."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """A model folder found in a repository; `duplicate_of` names a second root holding the same name.
    `namespace` is its repository with --model-namespacing (names may then repeat across repositories),
    else ""."""

    name: str
    path: Path
    duplicate_of: Path | None = None
    namespace: str = ""

    @property
    def key(self) -> str:
        """What the model manager knows the model by: its name, or its folder when namespaced."""
        return model_key(self.namespace, self.name)


def model_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def discover(roots: list[Path], namespacing: bool = False) -> dict[str, ModelSource]:
    """Every model folder of every root, by key. Without namespacing a name in two roots is kept,
    marked, so that only it fails; with it, each root is a namespace of its own."""
    found: dict[str, ModelSource] = {}
    for root in roots:
        if not root.is_dir():  # reported once at start-up (the server then failed to initialize)
            continue
        for entry in sorted(root.iterdir()):
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            if namespacing:
                source = ModelSource(entry.name, entry, namespace=str(root))
                found[source.key] = source
                continue
            if entry.name in found:
                found[entry.name] = ModelSource(entry.name, found[entry.name].path, duplicate_of=entry)
                continue
            found[entry.name] = ModelSource(entry.name, entry)
    return found


def version_folders(model_dir: Path) -> dict[int, Path]:
    """Numeric sub-folders; other folders are ignored with a warning, as Triton does."""
    versions: dict[int, Path] = {}
    for entry in sorted(model_dir.iterdir()):
        if not entry.is_dir() or entry.name == "configs" or entry.name.startswith("."):
            continue
        # Triton's wording: tools that watch its log look for these words.
        if not entry.name.isdigit():
            log.warning(
                "ignore version directory '%s' which fails to convert to integral number (model '%s')",
                entry.name,
                model_dir.name,
            )
        elif len(entry.name) > 1 and entry.name.startswith("0"):  # "003" is not version 3
            log.warning(
                "ignore version directory '%s' which contains leading zeros in its directory name (model '%s')",
                entry.name,
                model_dir.name,
            )
        else:
            versions[int(entry.name)] = entry
    return versions


def select_versions(policy: mc.ModelVersionPolicy, available: list[int], model_name: str = "") -> list[int]:
    """The versions a version policy serves, ascending. Default: the latest one. A specific version
    without a folder is left out (logged), as Triton does: the others still load."""
    ordered = sorted(available)
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return ordered
    if choice == "specific":
        for version in sorted(set(policy.specific.versions) - set(ordered)):
            log.error(
                "version %d is specified for model '%s', but the version directory is not present",
                version,
                model_name,
            )
        return sorted(set(policy.specific.versions) & set(ordered))
    count = policy.latest.num_versions if choice == "latest" else 1
    return ordered[-count:] if count > 0 else []


def tree_fingerprint(path: Path) -> str:
    """Changes when any file under `path` is added, removed, resized or rewritten (by its mtime).
    Bytecode caches are left out: loading a Python model writes them, and they follow its sources."""
    digest = hashlib.sha1()
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(name for name in dirs if name != "__pycache__")
        for name in sorted(files):
            file = os.path.join(folder, name)
            try:
                stat = os.stat(file)
            except OSError:  # removed while we looked: the next look sees the change
                continue
            digest.update(f"{os.path.relpath(file, path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def shared_files_fingerprint(model_dir: Path, config_path: Path | None) -> str:
    """Changes when the model folder's own files change: everything outside its version folders and
    its config. Every version may read them (a Python model's helper modules, labels, warmup data), so a
    change there reloads every version, as in Triton. Bytecode caches are left out: loading writes them."""
    skipped = {"__pycache__", "config.pbtxt"}  # without a config file, config.pbtxt is what may appear
    if config_path is not None and config_path.is_relative_to(model_dir):
        # the entry holding the config in use: configs/ under --model-config-name, config.pbtxt then counts
        skipped = {"__pycache__", config_path.relative_to(model_dir).parts[0]}
    digest = hashlib.sha1()
    try:
        entries = sorted(os.scandir(model_dir), key=lambda entry: entry.name)
    except OSError:  # the folder went away: the load that follows reports it
        return ""
    for entry in entries:
        if entry.name.isdigit() or entry.name in skipped:
            continue
        try:
            if entry.is_dir():
                digest.update(f"{entry.name}/\0{tree_fingerprint(Path(entry.path))}\n".encode())
            else:
                stat = entry.stat()
                digest.update(f"{entry.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        except OSError:  # removed while we looked: the next look sees the change
            continue
    return digest.hexdigest()
