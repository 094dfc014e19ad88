"""Uploaded model folders: names and paths beyond what the file system takes are the client's error."""

from __future__ import annotations

import pytest

from nereid.errors import InvalidArgument, PollFailed
from nereid.repository.uploads import (
    MAX_FILE_DEPTH,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    check_model_name,
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


@pytest.mark.parametrize("name", ["", " ", "\t", "\n", "\v", "\f", " \t \n "])
def test_a_blank_model_name_is_refused_as_empty(name: str) -> None:
    with pytest.raises(InvalidArgument, match="Model name cannot be empty"):
        check_model_name(name)


@pytest.mark.parametrize(
    "name",
    ["..", ".", " ..", ".. ", "../etc", "a/../b", "/etc/passwd", "model/", "model/sub", "a\\b", "a\0b"],
)
def test_a_model_name_that_is_not_one_folder_is_refused_as_traversal(name: str) -> None:
    with pytest.raises(InvalidArgument, match="must not contain path traversal characters"):
        check_model_name(name)


@pytest.mark.parametrize("name", ["model123", "model.version1", "...", "..my_model", "model..1", " padded "])
def test_names_with_dots_inside_one_folder_name_are_accepted(name: str) -> None:
    check_model_name(name)
