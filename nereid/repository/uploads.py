"""Models delivered whole through the load API (`file:<path>` parameters), kept in private folders."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath

from nereid.errors import InvalidArgument, PollFailed

FILE_PREFIX = "file:"
# What the file system takes, checked up front so that nothing is written for an upload beyond it. Triton
# finds these when its writes fail, and answers as for any unreadable upload (INTERNAL, "failed to poll").
MAX_NAME_BYTES = 255  # one folder or file name (NAME_MAX on Linux)
MAX_FILE_DEPTH = 64  # folders a `file:` path may nest
MAX_PATH_BYTES = 2048  # a whole `file:` path (PATH_MAX is 4096, and the private folder's path comes first)


def checked_relative_path(model_name: str, key: str) -> PurePosixPath:
    """The path named by a `file:` parameter, refused if it could land outside the model's folder."""
    text = key[len(FILE_PREFIX) :]
    path = PurePosixPath(text)
    if (
        not text
        or "\\" in text
        or "\0" in text
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in text.split("/"))
    ):
        raise InvalidArgument(
            f"failed to load '{model_name}', file parameter '{key}' must be a relative path inside the model "
            "folder (no '..', no absolute paths, no empty parts)"
        )
    parts = text.split("/")
    if len(parts) > MAX_FILE_DEPTH or len(text.encode()) > MAX_PATH_BYTES:
        raise PollFailed(
            model_name,
            f"file parameter '{key[:64]}...' is too deep or too long (at most {MAX_FILE_DEPTH} folders and "
            f"{MAX_PATH_BYTES} bytes)",
        )
    longest = max(parts, key=lambda part: len(part.encode()))
    if len(longest.encode()) > MAX_NAME_BYTES:
        raise PollFailed(
            model_name, f"file parameter '{key[:64]}...' has a name longer than {MAX_NAME_BYTES} bytes"
        )
    return path


# Clients (Triton's own tests among them) match these phrases, so they keep Triton's wording.
EMPTY_NAME = "Model name cannot be empty. Please enter a valid name to deploy."
TRAVERSAL_NAME = "model name must not contain path traversal characters"


def check_model_name(name: str) -> None:
    """A model name becomes a folder name: it may not be blank, nor climb out of or nest inside the
    repository. Surrounding white space is ignored for the check, so ' ..' is refused like '..'."""
    bare = name.strip()
    if not bare:
        raise InvalidArgument(f"'{name}' is not a valid model name: {EMPTY_NAME}")
    if bare in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise InvalidArgument(
            f"'{name}' is not a valid model name: {TRAVERSAL_NAME} (it must be a single folder name)"
        )
    if len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidArgument(
            f"'{name[:64]}...' is not a valid model name: it is longer than {MAX_NAME_BYTES} bytes"
        )


def write_model_folder(model_name: str, files: dict[str, bytes]) -> Path:
    """Write the files under a new private folder; returns `<folder>/<model_name>`."""
    check_model_name(model_name)
    relative = {checked_relative_path(model_name, key): data for key, data in files.items()}
    root = Path(tempfile.mkdtemp(prefix="nereid-model-"))
    model_dir = root / model_name
    try:
        model_dir.mkdir()
        for path, data in relative.items():
            target = model_dir.joinpath(*path.parts)
            # The folder is new and private, and we create every entry in it, so no link can redirect a write.
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as out:
                    out.write(data)
            except OSError as exc:  # e.g. one parameter names a file, another a folder at the same path
                raise PollFailed(model_name, f"cannot write '{path}': {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return model_dir


def remove_model_folder(model_dir: Path) -> None:
    shutil.rmtree(model_dir.parent, ignore_errors=True)
