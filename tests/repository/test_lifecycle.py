"""Loading, reloading and unloading models while they serve: explicit and poll modes, in process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nereid.errors import InvalidArgument, NotFound, PollFailed, Unavailable
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES

SIMPLE_ONNX = EXAMPLES / "simple" / "1" / "model.onnx"
CONFIG = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'


def _version(root: Path, name: str, version: int) -> None:
    (root / name / str(version)).mkdir(parents=True)
    shutil.copy(SIMPLE_ONNX, root / name / str(version) / "model.onnx")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name in ("alpha", "beta"):
        _version(tmp_path, name, 1)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG)
    return tmp_path


@pytest.fixture
def explicit(repo: Path) -> Iterator[ModelManager]:
    manager = ModelManager(
        ServerSettings(model_repositories=(repo,), model_control_mode="explicit", load_models=("alpha",))
    )
    manager.start()
    yield manager
    manager.stop()


def test_explicit_mode_loads_only_what_is_asked(explicit: ModelManager) -> None:
    assert explicit.get("alpha").version == 1
    with pytest.raises(NotFound, match="'beta' is not found"):
        explicit.get("beta")
    assert explicit.index() == [
        {"name": "alpha", "version": "1", "state": "READY"},
        {"name": "beta"},
    ]
    assert explicit.index(ready_only=True) == [{"name": "alpha", "version": "1", "state": "READY"}]


def test_load_unknown_model_names_the_reason(explicit: ModelManager) -> None:
    with pytest.raises(
        PollFailed, match="failed to load 'gamma', failed to poll from model repository: no model folder"
    ):
        explicit.load("gamma")


def test_reload_serves_the_new_version_and_retires_the_old(explicit: ModelManager, repo: Path) -> None:
    old = explicit.get("alpha")
    _version(repo, "alpha", 2)
    explicit.load("alpha")
    assert explicit.get("alpha").version == 2
    assert old.retired and old.drained is not None
    # the retired version stays known, as in Triton
    with pytest.raises(Unavailable, match="version 1 is not at ready state"):
        explicit.get("alpha", "1")
    assert {"name": "alpha", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in explicit.index()


def test_reload_without_changes_keeps_the_serving_instances(explicit: ModelManager) -> None:
    before = explicit.get("alpha")
    explicit.load("alpha")
    assert explicit.get("alpha") is before and not before.retired


def _policy(repo: Path, versions: str, extra: str = "") -> None:
    (repo / "alpha" / "config.pbtxt").write_text(
        CONFIG + extra + f"version_policy {{ specific {{ versions: [{versions}] }} }}\n"
    )


def _later(path: Path) -> None:
    """Rewritten, whatever the clock's resolution."""
    later = path.stat().st_mtime + 3600
    os.utime(path, (later, later))


def test_a_wider_version_policy_keeps_the_versions_already_serving(
    explicit: ModelManager, repo: Path
) -> None:
    """As in Triton: a config that changes only in its version policy leaves each version whose files
    did not change serving (not loaded again); a version whose files changed is loaded again."""
    _version(repo, "alpha", 2)
    _version(repo, "alpha", 3)
    _policy(repo, "1, 2")
    explicit.load("alpha")
    one, two = explicit.get("alpha", "1"), explicit.get("alpha", "2")
    _later(repo / "alpha" / "2" / "model.onnx")
    _policy(repo, "1, 2, 3")
    explicit.load("alpha")
    assert explicit.get("alpha", "1") is one and not one.retired
    assert explicit.get("alpha", "2") is not two and two.retired
    assert explicit.get("alpha", "3").version == 3
    # the kept version answers with the policy now in force
    assert one.config_json["version_policy"] == {"specific": {"versions": [1, 2, 3]}}
    assert one.metadata["versions"] == ["1", "2", "3"]


def test_a_narrower_version_policy_unloads_only_the_versions_it_leaves_out(
    explicit: ModelManager, repo: Path
) -> None:
    _version(repo, "alpha", 2)
    _policy(repo, "1, 2")
    explicit.load("alpha")
    one, two = explicit.get("alpha", "1"), explicit.get("alpha", "2")
    _policy(repo, "2")
    explicit.load("alpha")
    assert explicit.get("alpha", "2") is two and not two.retired
    assert one.retired
    _policy(repo, "1, 2")
    explicit.load("alpha")
    assert explicit.get("alpha", "2") is two and explicit.get("alpha", "1") is not one


def test_other_config_changes_load_every_version_again(explicit: ModelManager, repo: Path) -> None:
    _version(repo, "alpha", 2)
    _policy(repo, "1, 2")
    explicit.load("alpha")
    one = explicit.get("alpha", "1")
    _policy(repo, "1, 2", extra="dynamic_batching {}\n")
    explicit.load("alpha")
    assert explicit.get("alpha", "1") is not one and one.retired


def test_a_file_beside_the_version_folders_loads_every_version_again(
    explicit: ModelManager, repo: Path
) -> None:
    """Files in the model folder outside its versions (a Python model's helper modules, say) may be read
    by any version: adding or changing one reloads them all, as in Triton."""
    _version(repo, "alpha", 2)
    _policy(repo, "1, 2")
    explicit.load("alpha")
    one, two = explicit.get("alpha", "1"), explicit.get("alpha", "2")
    (repo / "alpha" / "helpers.py").write_text("")
    explicit.load("alpha")
    assert one.retired and two.retired
    one, two = explicit.get("alpha", "1"), explicit.get("alpha", "2")
    (repo / "alpha" / "__pycache__").mkdir()  # bytecode caches are not files a version reads
    (repo / "alpha" / "__pycache__" / "helpers.cpython-312.pyc").write_bytes(b"")
    (repo / "alpha" / "1" / "__pycache__").mkdir()
    (repo / "alpha" / "1" / "__pycache__" / "model.cpython-312.pyc").write_bytes(b"")
    explicit.load("alpha")
    assert explicit.get("alpha", "1") is one and explicit.get("alpha", "2") is two


def test_failed_reload_keeps_the_old_version_serving(explicit: ModelManager, repo: Path) -> None:
    old = explicit.get("alpha")
    (repo / "alpha" / "2").mkdir()
    (repo / "alpha" / "2" / "model.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(InvalidArgument, match="load failed for model 'alpha'.*keep serving"):
        explicit.load("alpha")
    assert explicit.get("alpha") is old and not old.retired


def test_unload_then_load_again(explicit: ModelManager) -> None:
    explicit.unload("alpha")
    with pytest.raises(NotFound, match="'alpha' has no available versions"):
        explicit.get("alpha")
    with pytest.raises(Unavailable, match="version 1 is not at ready state"):
        explicit.get("alpha", "1")
    assert {"name": "alpha", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in explicit.index()
    explicit.unload("alpha")  # unloading twice, or an unknown model, is not an error
    explicit.unload("nobody")
    explicit.load("alpha")
    assert explicit.get("alpha").version == 1


def test_unload_waits_for_requests_in_flight(explicit: ModelManager) -> None:
    model = explicit.get("alpha")
    model.inflight += 1  # a request the event loop is serving
    unloading = threading.Thread(target=explicit.unload, args=("alpha",))
    unloading.start()
    assert _wait_for(lambda: model.retired)
    assert unloading.is_alive()  # still waiting for the request
    assert explicit.index()[0]["state"] == "UNLOADING"
    model.request_done()
    unloading.join(10)
    assert not unloading.is_alive()


def test_config_override_replaces_config_pbtxt(explicit: ModelManager) -> None:
    override = json.dumps({"platform": "onnxruntime_onnx", "max_batch_size": 2})
    explicit.load("alpha", config=override)
    assert explicit.get("alpha").config_json["max_batch_size"] == 2
    # A 'config' parameter that cannot be read is a poll failure, as in Triton (INTERNAL).
    poll_failure = "failed to load 'alpha', failed to poll from model repository: "
    with pytest.raises(
        PollFailed, match=poll_failure + "model 'alpha': the 'config' parameter names the model 'other'"
    ):
        explicit.load("alpha", config=json.dumps({"name": "other"}))
    with pytest.raises(PollFailed, match=poll_failure + ".* is not valid JSON"):
        explicit.load("alpha", config="{bad")
    assert explicit.get("alpha").config_json["max_batch_size"] == 2  # still serving the override
    explicit.load("alpha")  # a load without 'config' keeps the one given before, as in Triton
    assert explicit.get("alpha").config_json["max_batch_size"] == 2
    explicit.unload("alpha")  # until the model is unloaded
    explicit.load("alpha")
    assert explicit.get("alpha").config_json["max_batch_size"] == 8


def test_a_config_pbtxt_written_after_an_override_wins(explicit: ModelManager, repo: Path) -> None:
    explicit.load("alpha", config=json.dumps({"platform": "onnxruntime_onnx", "max_batch_size": 2}))
    config = repo / "alpha" / "config.pbtxt"
    later = config.stat().st_mtime + 3600  # written after the override, whatever the clock's resolution
    os.utime(config, (later, later))
    explicit.load("alpha")
    assert explicit.get("alpha").config_json["max_batch_size"] == 8


def test_model_delivered_as_files(explicit: ModelManager) -> None:
    config = json.dumps({"platform": "onnxruntime_onnx", "max_batch_size": 4})
    explicit.load("delivered", config=config, files={"file:1/model.onnx": SIMPLE_ONNX.read_bytes()})
    assert explicit.get("delivered").version == 1
    # it serves from a private folder, which unload removes
    private = [p for p in Path(tempfile.gettempdir()).glob("nereid-model-*") if (p / "delivered").exists()]
    assert len(private) == 1
    explicit.unload("delivered")
    assert not private[0].exists()
    with pytest.raises(
        PollFailed, match="failed to poll from model repository: file parameters need a 'config'"
    ):
        explicit.load("delivered", files={"file:1/model.onnx": b"x"})


@pytest.mark.parametrize(
    "name, key",
    [
        ("ok", "file:../escape/model.onnx"),
        ("ok", "file:/tmp/absolute/model.onnx"),
        ("ok", "file:1/../../model.onnx"),
        ("ok", "file:"),
        ("ok", "file:1//model.onnx"),
        ("../up", "file:1/model.onnx"),
        ("a/b", "file:1/model.onnx"),
        ("..", "file:1/model.onnx"),
    ],
)
def test_paths_cannot_leave_the_private_folder(
    explicit: ModelManager, tmp_path: Path, name: str, key: str
) -> None:
    before = set(Path(tempfile.gettempdir()).glob("nereid-model-*"))
    with pytest.raises(InvalidArgument):
        explicit.load(name, config="{}", files={key: b"payload"})
    assert set(Path(tempfile.gettempdir()).glob("nereid-model-*")) == before
    assert not (tmp_path / "escape").exists() and not Path("/tmp/absolute").exists()


def test_poll_applies_changes_on_disk(repo: Path) -> None:
    manager = ModelManager(ServerSettings(model_repositories=(repo,), model_control_mode="poll"))
    manager.load_all()  # start() without the polling thread: poll() is driven by hand below
    try:
        assert manager.get("alpha").version == 1
        _version(repo, "alpha", 2)
        manager.poll()
        assert manager.get("alpha").version == 2
        # a half-written version does not take the serving one down
        (repo / "alpha" / "3").mkdir()
        (repo / "alpha" / "3" / "model.onnx").write_bytes(b"half written")
        manager.poll()
        assert manager.get("alpha").version == 2
        # a new model appears, a removed one goes
        _version(repo, "gamma", 1)
        shutil.rmtree(repo / "beta")
        manager.poll()
        assert manager.get("gamma").version == 1
        with pytest.raises(NotFound):
            manager.get("beta")
        manager.poll()  # nothing changed: nothing reloads
        assert manager.get("gamma").version == 1
        # the removed model stays known as unloaded, however often the repository is polled
        with pytest.raises(NotFound, match="'beta' has no available versions"):
            manager.get("beta")
        # and comes back when its folder does
        _version(repo, "beta", 1)
        (repo / "beta" / "config.pbtxt").write_text(CONFIG)
        manager.poll()
        assert manager.get("beta").version == 1
    finally:
        manager.stop()


def _wait_for(condition: object, timeout: float = 10.0) -> bool:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if condition():  # type: ignore[operator]
                return True
            done.wait(0.005)
        return False
    finally:
        deadline.cancel()


def test_load_of_a_folder_without_config_fails_to_poll(repo: Path) -> None:
    (repo / "alpha" / "config.pbtxt").unlink()
    settings = ServerSettings(
        model_repositories=(repo,), model_control_mode="explicit", auto_complete_config=False
    )
    manager = ModelManager(settings)
    manager.start()
    try:
        with pytest.raises(
            PollFailed, match="failed to poll from model repository: failed to open text file"
        ):
            manager.load("alpha")
        assert {"name": "alpha"} in manager.index()  # listed, never loaded
        assert manager.all_ready()
    finally:
        manager.stop()


def test_a_model_copied_into_a_second_repository(repo: Path, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    second = tmp_path_factory.mktemp("second")
    for mode in ("explicit", "poll"):
        settings = ServerSettings(model_repositories=(repo, second), model_control_mode=mode)
        manager = ModelManager(settings)
        manager.load_all()  # start() without the polling thread: poll() is driven by hand below
        try:
            shutil.copytree(repo / "alpha", second / "alpha")
            if mode == "explicit":  # a load fails to poll it; the version serving keeps serving
                with pytest.raises(PollFailed, match="failed to load 'alpha', .*two or more repositories"):
                    manager.load("alpha")
                assert manager.get("alpha").version == 1
            else:  # polling takes it down, until the copy goes
                manager.poll()
                with pytest.raises(NotFound, match="no available versions"):
                    manager.get("alpha")
                assert manager.all_ready()  # not a failed model: polling cannot see it
                shutil.rmtree(second / "alpha")
                manager.poll()
                assert manager.get("alpha").version == 1
        finally:
            manager.stop()
            shutil.rmtree(second / "alpha", ignore_errors=True)


def test_a_failed_version_is_named_as_triton_names_it(explicit: ModelManager, repo: Path) -> None:
    (repo / "alpha" / "config.pbtxt").write_text(CONFIG + "version_policy { all {} }")
    (repo / "alpha" / "0").mkdir()  # not the latest, which auto-complete reads
    (repo / "alpha" / "0" / "model.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(
        InvalidArgument, match="load failed for model 'alpha': version 0 is at UNAVAILABLE state: "
    ):
        explicit.load("alpha")


def test_each_version_taken_down_is_logged_as_unloaded(
    explicit: ModelManager, repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def unloaded() -> list[str]:
        return [r.getMessage() for r in caplog.records if "successfully unloaded" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="nereid"):
        _version(repo, "alpha", 2)
        explicit.load("alpha")  # version 2 replaces version 1, which is unloaded
        assert unloaded() == ["successfully unloaded 'alpha' version 1"]
        explicit.stop()  # at shutdown, each serving version as well
        assert unloaded() == [
            "successfully unloaded 'alpha' version 1",
            "successfully unloaded 'alpha' version 2",
        ]


def test_stop_lets_a_load_under_way_end_then_unloads_what_it_loaded(
    explicit: ModelManager, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    loading, release = threading.Event(), threading.Event()
    original = explicit._load_model

    def slow_load(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        loading.set()
        assert release.wait(10)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(explicit, "_load_model", slow_load)
    with caplog.at_level(logging.DEBUG - 1, logger="nereid"):
        loader = threading.Thread(target=explicit.load, args=("beta",))
        loader.start()
        assert loading.wait(10)
        stopper = threading.Thread(target=explicit.stop)
        stopper.start()
        stopper.join(0.2)
        assert stopper.is_alive()  # it waits for the load
        release.set()
        loader.join(10)
        stopper.join(10)
        assert not stopper.is_alive()
    steps = [
        r.getMessage()
        for r in caplog.records
        if "'beta'" in r.getMessage() and ("()" in r.getMessage() or "unloaded" in r.getMessage())
    ]
    assert steps == [
        "OnLoadFinal() 'beta': the load has ended",
        "AsyncUnload() 'beta': unloading at shutdown",
        "successfully unloaded 'beta' version 1",
    ]


def test_each_successful_load_is_logged_once(repo: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As Triton's log: one line per load that serves every version asked for, whether it started,
    reloaded or kept versions; none for a load that failed."""

    def loaded() -> list[str]:
        return [r.getMessage() for r in caplog.records if "successfully loaded" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="nereid"):
        manager = ModelManager(
            ServerSettings(model_repositories=(repo,), model_control_mode="explicit", load_models=("alpha",))
        )
        manager.start()
        try:
            assert loaded() == ["successfully loaded 'alpha'"]
            manager.load("alpha")  # nothing changed: the version is kept, and the load still succeeds
            _version(repo, "alpha", 2)
            manager.load("alpha")
            assert loaded() == ["successfully loaded 'alpha'"] * 3
            (repo / "beta" / "1" / "model.onnx").write_bytes(b"not an onnx file")
            with pytest.raises(InvalidArgument):
                manager.load("beta")
            assert loaded() == ["successfully loaded 'alpha'"] * 3
        finally:
            manager.stop()


def test_the_startup_table_shows_a_tracebacks_first_line(tmp_path: Path) -> None:
    (tmp_path / "failing" / "1").mkdir(parents=True)
    (tmp_path / "failing" / "config.pbtxt").write_text(
        'backend: "python"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    (tmp_path / "failing" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise ValueError('the weights file is missing')\n"
    )
    manager = ModelManager(ServerSettings(model_repositories=(tmp_path,)))
    manager.start()
    try:
        ((name, version, status),) = manager.model_table()
        reason = manager.index()[0]["reason"]
    finally:
        manager.stop()
    assert "\n" in reason and "model.py" in reason  # the index and the log keep the traceback
    assert (name, version) == ("failing", "1")
    assert status == ("UNAVAILABLE: ValueError: the weights file is missing (traceback in the log above)")
