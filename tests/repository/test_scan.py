from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from nereid.repository.scan import discover, select_versions, shared_files_fingerprint, version_folders


def test_version_policies() -> None:
    available = [3, 1, 2, 10]
    assert select_versions(mc.ModelVersionPolicy(), available) == [10]
    assert select_versions(mc.ModelVersionPolicy(latest={"num_versions": 2}), available) == [3, 10]
    assert select_versions(mc.ModelVersionPolicy(all={}), available) == [1, 2, 3, 10]


def test_a_specific_version_without_folder_is_left_out(caplog) -> None:  # type: ignore[no-untyped-def]
    policy = mc.ModelVersionPolicy(specific={"versions": [2, 7]})
    assert select_versions(policy, [3, 1, 2, 10], "m") == [2]
    assert "version 7 is specified for model 'm', but the version directory is not present" in caplog.text


def test_non_numeric_version_folders_are_ignored(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    for name in ("1", "2", "latest", "003", "0", "configs"):
        (tmp_path / name).mkdir()
    assert sorted(version_folders(tmp_path)) == [0, 1, 2]  # "003" is not version 3
    assert "ignore version directory 'latest' which fails to convert to integral number" in caplog.text
    assert "ignore version directory '003' which contains leading zeros in its directory name" in caplog.text
    assert "configs" not in caplog.text


def test_same_model_in_two_roots_is_marked(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "m").mkdir(parents=True)
    (b / "m").mkdir(parents=True)
    (b / "n").mkdir()
    found = discover([a, b])
    assert found["m"].duplicate_of == b / "m"
    assert found["n"].duplicate_of is None


def test_shared_files_leave_out_versions_and_the_config_in_use(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "configs").mkdir()
    custom = tmp_path / "configs" / "custom.pbtxt"
    custom.write_text("")
    default = tmp_path / "config.pbtxt"
    default.write_text("")

    def changed(path: Path, config: Path | None) -> bool:
        before = shared_files_fingerprint(tmp_path, config)
        path.write_text((path.read_text() if path.exists() else "") + "x")  # grows: seen whatever the clock
        return shared_files_fingerprint(tmp_path, config) != before

    assert not changed(tmp_path / "1" / "model.py", default)  # a version's own files
    assert not changed(default, default)
    assert changed(custom, default)  # configs/ is a file like any other when config.pbtxt is used
    # under --model-config-name, configs/ holds the config and config.pbtxt is a file like any other
    assert not changed(custom, custom)
    assert changed(default, custom)
    assert changed(tmp_path / "labels.txt", default)
