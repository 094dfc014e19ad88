"""Which Python runs a model's workers: the server's own, or the model's EXECUTION_ENV_PATH environment.

As in Triton, EXECUTION_ENV_PATH names an environment folder or a conda-pack archive (`.tar.gz`), and
`$$TRITON_MODEL_DIRECTORY` in it stands for the model's folder. Archives are unpacked once into a cache
folder keyed by the archive's path, size and modification time, and reused by later loads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from nereid.errors import ModelConfigError, Unavailable

_MARKER = ".nereid-unpacked"


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nereid" / "python-envs"


def worker_python(
    env_path: str, model_dir: Path, cache_dir: Path | None = None
) -> tuple[str, Mapping[str, str] | None]:
    """(interpreter, process environment) for the workers; (sys.executable, None) without an env path."""
    if not env_path:
        return sys.executable, None
    path = Path(env_path.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))).expanduser()
    if not path.is_absolute():
        path = model_dir / path
    if path.is_dir():
        root = path
    elif path.is_file():
        root = _unpack(path, cache_dir or default_cache_dir())
    else:
        raise ModelConfigError(f"EXECUTION_ENV_PATH '{env_path}' is neither a folder nor an archive: {path}")
    for name in ("python3", "python"):
        python = root / "bin" / name
        if python.exists():
            break
    else:
        raise ModelConfigError(f"EXECUTION_ENV_PATH '{env_path}' holds no bin/python ({root})")
    environment = dict(os.environ)
    # The environment's own packages, not the server's; as `bin/activate` would set it up.
    for key in ("PYTHONHOME", "PYTHONPATH"):
        environment.pop(key, None)
    environment["PATH"] = os.pathsep.join(p for p in (str(root / "bin"), environment.get("PATH")) if p)
    environment["CONDA_PREFIX"] = str(root)
    environment["VIRTUAL_ENV"] = str(root)
    return str(python), environment


def _unpack(archive: Path, cache_dir: Path) -> Path:
    stat = archive.stat()
    key = hashlib.sha256(f"{archive.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    target = cache_dir / key
    if (target / _MARKER).exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_dir))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, filter="tar")  # conda-pack archives may hold absolute links
            else:  # Python without extraction filters: refuse members that leave the folder
                for member in tar.getmembers():
                    if member.name.startswith("/") or ".." in Path(member.name).parts:
                        raise Unavailable(
                            f"EXECUTION_ENV_PATH archive {archive} has unsafe member {member.name}"
                        )
                tar.extractall(staging)  # noqa: S202 (members checked above)
        unpack_script = staging / "bin" / "conda-unpack"
        if unpack_script.exists():  # conda-pack's fix-up of hard-coded prefixes
            subprocess.run([str(unpack_script)], check=True, capture_output=True)
        (staging / _MARKER).touch()
        try:
            staging.rename(target)
        except OSError:  # another load unpacked it first
            if not (target / _MARKER).exists():
                raise
    except (OSError, tarfile.TarError, subprocess.CalledProcessError) as exc:
        raise Unavailable(f"cannot unpack EXECUTION_ENV_PATH archive {archive}: {exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
