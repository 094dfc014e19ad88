"""Loading models from folders: auto-complete, version policies, failures kept per model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nereid.errors import NotFound, Unavailable
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES

SIMPLE_ONNX = EXAMPLES / "simple" / "1" / "model.onnx"


def _manager(*roots: Path, **settings: object) -> ModelManager:
    manager = ModelManager(ServerSettings(model_repositories=roots, **settings))  # type: ignore[arg-type]
    manager.load_all()
    return manager


def _model(root: Path, name: str, versions: tuple[int, ...] = (1,), config: str | None = None) -> Path:
    for version in versions:
        (root / name / str(version)).mkdir(parents=True)
        shutil.copy(SIMPLE_ONNX, root / name / str(version) / "model.onnx")
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    return root / name


def test_a_model_without_config_is_auto_completed(tmp_path: Path) -> None:
    _model(tmp_path, "bare")
    manager = _manager(tmp_path)
    try:
        config = manager.get("bare").config_json
        assert config["backend"] == "onnxruntime" and config["platform"] == "onnxruntime_onnx"
        assert config["max_batch_size"] == 4  # the default-max-batch-size
        assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
        assert config["input"][0]["dims"] == [16] and config["input"][0]["data_type"] == "TYPE_INT32"
        assert "dynamic_batching" in config
    finally:
        manager.stop()


def test_auto_complete_can_be_disabled(tmp_path: Path) -> None:
    _model(tmp_path, "bare", config='platform: "onnxruntime_onnx"')
    manager = _manager(tmp_path, auto_complete_config=False)
    try:
        with pytest.raises(NotFound, match="no available versions"):
            manager.get("bare")
        (row,) = manager.index()
        assert row["state"] == "UNAVAILABLE" and "no inputs or outputs" in row["reason"]
    finally:
        manager.stop()


def test_version_policies_choose_what_loads(tmp_path: Path) -> None:
    _model(tmp_path, "latest", (1, 2, 3), 'platform: "onnxruntime_onnx"')
    _model(tmp_path, "all", (1, 2), 'platform: "onnxruntime_onnx" version_policy { all {} }')
    _model(
        tmp_path,
        "specific",
        (1, 2, 3),
        'platform: "onnxruntime_onnx" version_policy { specific { versions: [1, 3] } }',
    )
    manager = _manager(tmp_path)
    try:
        assert manager.get("latest").version == 3
        with pytest.raises(NotFound, match="version 2 is not found"):
            manager.get("latest", "2")
        assert manager.get("all", "1").version == 1 and manager.get("all").version == 2
        assert manager.get("specific", "1").metadata["versions"] == ["1", "3"]
    finally:
        manager.stop()


def test_a_broken_model_does_not_stop_the_others(tmp_path: Path) -> None:
    _model(tmp_path, "good", config='platform: "onnxruntime_onnx"')
    _model(
        tmp_path,
        "wrong_type",
        config=(
            'platform: "onnxruntime_onnx" max_batch_size: 8\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [16] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [16] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] } ]'
        ),
    )
    _model(tmp_path, "other_backend", config='backend: "caffe2"')
    (tmp_path / "empty_versions").mkdir()
    (tmp_path / "empty_versions" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"')
    manager = _manager(tmp_path)
    try:
        assert manager.get("good").version == 1
        reasons = {row["name"]: row["reason"] for row in manager.index() if row["state"] == "UNAVAILABLE"}
        assert "TYPE_FP32 in the configuration but tensor(int32) in the model" in reasons["wrong_type"]
        assert "backend 'caffe2' is not supported" in reasons["other_backend"]
        assert "empty_versions" in reasons
        assert not manager.all_ready()
    finally:
        manager.stop()


def test_backend_named_by_folder_suffix(tmp_path: Path) -> None:
    _model(tmp_path, "adder.onnxruntime")
    manager = _manager(tmp_path)
    try:
        assert manager.get("adder.onnxruntime").config.backend == "onnxruntime"
    finally:
        manager.stop()


def test_a_name_in_two_repositories_fails_only_that_model(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _model(first, "twice", config='platform: "onnxruntime_onnx"')
    _model(second, "twice", config='platform: "onnxruntime_onnx"')
    _model(second, "once", config='platform: "onnxruntime_onnx"')
    manager = _manager(first, second)
    try:
        assert manager.get("once").version == 1
        with pytest.raises(NotFound, match="no available versions"):
            manager.get("twice")
        (row,) = [r for r in manager.index() if r["name"] == "twice"]
        assert row == {
            "name": "twice",
            "state": "UNAVAILABLE",
            "reason": "model appears in two or more repositories",
        }
    finally:
        manager.stop()


def test_backend_detected_from_the_model_file(tmp_path: Path) -> None:
    _model(tmp_path, "plain", config="max_batch_size: 8")
    manager = _manager(tmp_path)
    try:
        assert manager.get("plain").config_json["platform"] == "onnxruntime_onnx"
    finally:
        manager.stop()


def test_onnxruntime_session_parameters(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "tuned",
        config=(
            'platform: "onnxruntime_onnx"\n'
            'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
            "optimization { graph { level: 1 } }"
        ),
    )
    _model(
        tmp_path,
        "bad_threads",
        config=(
            'platform: "onnxruntime_onnx"\n'
            'parameters { key: "intra_op_thread_count" value: { string_value: "many" } }'
        ),
    )
    manager = _manager(tmp_path)
    try:
        session = manager.get("tuned").scheduler.pool.instances[0]._session  # type: ignore[attr-defined]  # auto-completed: the dynamic batcher
        options = session.get_session_options()
        assert options.intra_op_num_threads == 1
        assert options.graph_optimization_level.name == "ORT_ENABLE_EXTENDED"
        (row,) = [r for r in manager.index() if r["name"] == "bad_threads"]
        assert "'intra_op_thread_count' must be an integer, got 'many'" in row["reason"]
    finally:
        manager.stop()


# The example model's whole configuration, for loads without auto-complete.
_COMPLETE = 'platform: "onnxruntime_onnx" max_batch_size: 8\n' + "".join(
    f'{kind} {{ name: "{kind.upper()}{i}" data_type: TYPE_INT32 dims: [16] }}\n'
    for kind in ("input", "output")
    for i in (0, 1)
)


def test_a_failed_version_takes_down_the_versions_that_loaded(tmp_path: Path) -> None:
    path = _model(tmp_path, "half", (1, 3), _COMPLETE + "version_policy { all {} }")
    (path / "3" / "model.onnx").write_bytes(b"not an onnx file")
    manager = _manager(tmp_path, auto_complete_config=False)  # so only version 3 reads the broken file
    try:
        with pytest.raises(NotFound, match="'half' has no available versions"):
            manager.get("half")
        rows = {row["version"]: row for row in manager.index()}
        assert rows["1"] == {"name": "half", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        assert rows["3"]["state"] == "UNAVAILABLE" and rows["3"]["reason"] != "unloaded"
        assert not manager.all_ready()
    finally:
        manager.stop()


def test_a_specific_version_without_folder_does_not_fail_the_model(tmp_path: Path) -> None:
    path = _model(
        tmp_path, "m", (1, 3), 'platform: "onnxruntime_onnx" version_policy { specific { versions: [1, 3] } }'
    )
    (path / "3").rename(path / "003")  # not a version folder
    manager = _manager(tmp_path)
    try:
        assert manager.get("m").version == 1
        assert manager.all_ready()
    finally:
        manager.stop()


def test_without_auto_complete_a_folder_without_config_is_left_out(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    _model(tmp_path, "bare")
    _model(tmp_path, "good", config=_COMPLETE)
    manager = _manager(tmp_path, auto_complete_config=False)
    try:
        with pytest.raises(NotFound, match="'bare' is not found"):
            manager.get("bare")
        assert manager.all_ready()  # not a model that failed: strict readiness holds
        assert {"name": "bare"} in manager.index()
        assert (
            f"failed to open text file for read {tmp_path / 'bare' / 'config.pbtxt'}: No such file"
            in caplog.text
        )
    finally:
        manager.stop()


def test_a_failed_load_is_tried_again_as_often_as_asked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from nereid.repository import manager as manager_module
    from nereid.repository.loader import LoadResult

    _model(tmp_path, "flaky", config='platform: "onnxruntime_onnx"')
    real, attempts = manager_module.load_model, []

    def load_model(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append(source.name)
        if len(attempts) < 3:  # fails twice, then loads
            return LoadResult(source.name, {}, {1: "not yet"})
        return real(source, *args, **kwargs)

    monkeypatch.setattr(manager_module, "load_model", load_model)
    manager = _manager(tmp_path, model_load_retry_count=1)
    try:
        assert len(attempts) == 2  # one retry is not enough
        with pytest.raises(Unavailable):
            manager.get("flaky", "1")
    finally:
        manager.stop()
    attempts.clear()
    manager = _manager(tmp_path, model_load_retry_count=2)
    try:
        assert len(attempts) == 3 and manager.get("flaky").version == 1
    finally:
        manager.stop()


def test_a_versions_instances_start_side_by_side(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading

    from nereid.backends.onnxruntime import OnnxRuntimeBackend

    _model(
        tmp_path, "pair", config='platform: "onnxruntime_onnx"\ninstance_group [{ kind: KIND_CPU count: 2 }]'
    )
    together = threading.Barrier(2, timeout=10)  # broken unless both instances start at once
    real = OnnxRuntimeBackend.create_instance

    def create_instance(self, spec):  # type: ignore[no-untyped-def]
        together.wait()
        return real(self, spec)

    monkeypatch.setattr(OnnxRuntimeBackend, "create_instance", create_instance)
    manager = _manager(tmp_path)
    try:
        assert len(manager.get("pair").scheduler.pool.instances) == 2
    finally:
        manager.stop()


def test_auto_complete_reads_a_version_the_policy_loads(tmp_path: Path) -> None:
    path = _model(
        tmp_path,
        "older",
        (1, 2),
        'platform: "onnxruntime_onnx" version_policy { specific { versions: [1] } }',
    )
    (path / "2" / "model.onnx").unlink()  # the newest folder is empty; the policy does not load it
    manager = _manager(tmp_path)
    try:
        assert manager.get("older").version == 1
    finally:
        manager.stop()
