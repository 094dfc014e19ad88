"""Uploaded model folders: names and paths beyond what the file system takes are the client's error."""

from __future__ import annotations

import pytest

from nereid.errors import InvalidArgument, PollFailed
from nereid.repository.uploads import (
    MAX_FILE_DEPTH,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    remove_model_folder,
    write_model_folder,
)


def test_a_model_name_longer_than_the_limit_is_refused_naming_it() -> None:
    with pytest.raises(InvalidArgument, match=f"longer than {MAX_NAME_BYTES} bytes"):
        write_model_folder("m" * 300, {"file:1/model.onnx": b"x"})


def test_a_file_nested_2000_folders_deep_is_refused() -> None:
    with pytest.raises(PollFailed, match=f"at most {MAX_FILE_DEPTH} folders and {MAX_PATH_BYTES} bytes"):
        write_model_folder("m", {"file:" + "d/" * 2000 + "model.py": b"x"})


def test_a_file_name_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(PollFailed, match=f"name longer than {MAX_NAME_BYTES} bytes"):
        write_model_folder("m", {"file:1/" + "f" * 300: b"x"})


def test_paths_at_the_limits_are_written() -> None:
    deep = "/".join(["d"] * (MAX_FILE_DEPTH - 1)) + "/" + "f" * MAX_NAME_BYTES
    folder = write_model_folder("m" * MAX_NAME_BYTES, {"file:" + deep: b"data"})
    try:
        assert folder.joinpath(*deep.split("/")).read_bytes() == b"data"
    finally:
        remove_model_folder(folder)
