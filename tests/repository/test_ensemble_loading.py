"""Ensembles in the model manager, in process: load order at start, poll mode, and cycles between
ensembles, over the ONNX `simple` model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nereid.errors import NotFound
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES

IO = (
    'input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
    'output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
)


def _simple(root: Path, name: str) -> None:
    shutil.copytree(EXAMPLES / "simple", root / name)
    config = root / name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "simple"', f'name: "{name}"'))


def one_step_ensemble(
    root: Path, name: str, member: str, member_io: tuple[str, str, str, str], swap: bool = False
) -> None:
    """One step: A, B -> `member` -> SUM, DIFF; `member_io` names the member's two inputs and outputs, whose
    outputs `swap` exchanges (SUM is then the member's second output)."""
    a, b, total, diff = member_io
    if swap:
        total, diff = diff, total
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{IO}'
        f'ensemble_scheduling {{ step [ {{ model_name: "{member}" model_version: -1 '
        f'input_map {{ key: "{a}" value: "A" }} input_map {{ key: "{b}" value: "B" }} '
        f'output_map {{ key: "{total}" value: "SUM" }} output_map {{ key: "{diff}" value: "DIFF" }} }} ] }}\n'
    )


ONNX = ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
NESTED = ("A", "B", "SUM", "DIFF")


def _manager(root: Path, mode: str = "none") -> ModelManager:
    return ModelManager(
        ServerSettings(model_repositories=(root,), model_control_mode=mode, exit_timeout_secs=5)
    )


def test_ensembles_load_after_what_they_call_whatever_their_names(tmp_path: Path) -> None:
    _simple(tmp_path, "zeta")
    one_step_ensemble(tmp_path, "b_pipe", "zeta", ONNX)
    one_step_ensemble(tmp_path, "a_outer", "b_pipe", NESTED)  # an ensemble of an ensemble, named before it
    manager = _manager(tmp_path)
    manager.load_all()
    try:
        assert {row["name"]: row["state"] for row in manager.index()} == dict.fromkeys(
            ("a_outer", "b_pipe", "zeta"), "READY"
        )
        assert manager.get("a_outer").metadata["platform"] == "ensemble"
    finally:
        manager.stop()


def test_ensembles_calling_each_other_fail_and_say_why(tmp_path: Path) -> None:
    one_step_ensemble(tmp_path, "ping", "pong", NESTED)
    one_step_ensemble(tmp_path, "pong", "ping", NESTED)
    manager = _manager(tmp_path)
    manager.load_all()  # returns: no deadlock, no endless recursion
    try:
        reasons = {row["name"]: row["reason"] for row in manager.index()}
        assert reasons == {
            "ping": "ensemble ping contains models that are not available or ambiguous: pong",
            "pong": "ensemble pong contains models that are not available or ambiguous: ping",
        }
        with pytest.raises(NotFound, match="'ping' is not found"):
            manager.get("ping")
    finally:
        manager.stop()


def test_poll_mode_follows_an_ensemble_and_its_member(tmp_path: Path) -> None:
    _simple(tmp_path, "alpha")
    manager = _manager(tmp_path, "poll")
    manager.load_all()  # start() without the polling thread: poll() is driven by hand below
    try:
        # an ensemble and the model it calls appear together; the ensemble is polled first
        one_step_ensemble(tmp_path, "a_pipe", "zeta", ONNX)
        _simple(tmp_path, "zeta")
        manager.poll()
        assert manager.is_ready("a_pipe") and manager.is_ready("zeta")
        shutil.rmtree(tmp_path / "zeta")  # the member goes: the ensemble goes with it
        manager.poll()
        assert not manager.is_ready("zeta") and not manager.is_ready("a_pipe")
        _simple(tmp_path, "zeta")  # and comes back with it
        manager.poll()
        assert manager.is_ready("a_pipe")
    finally:
        manager.stop()


def test_unloading_a_member_waits_for_the_ensemble_that_loads_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading

    from nereid.repository import manager as manager_module

    _simple(tmp_path, "zeta")
    one_step_ensemble(tmp_path, "pipe", "zeta", ONNX)
    manager = _manager(tmp_path, "explicit")
    manager.start()
    unload_called = threading.Event()
    unloading = threading.Thread(target=manager.unload, args=("zeta",))
    original_load, original_unload = manager_module.load_model, manager._unload

    def load_model(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        if source.name == "zeta":  # the member has loaded: now the unload arrives
            result = original_load(source, *args, **kwargs)
            unloading.start()
            assert unload_called.wait(10)
            return result
        unloading.join(1.0)  # an unload that does not wait would be done by now
        return original_load(source, *args, **kwargs)

    def unload(name: str, keys: object) -> list[str]:
        unload_called.set()
        return original_unload(name, keys)  # type: ignore[arg-type]

    monkeypatch.setattr(manager_module, "load_model", load_model)
    monkeypatch.setattr(manager, "_unload", unload)
    try:
        manager.load("pipe")  # loads zeta first; the unload of zeta waits until pipe is loaded
        unloading.join(10)
        assert not unloading.is_alive()
        with pytest.raises(NotFound):  # and then takes pipe down with it
            manager.get("pipe")
        with pytest.raises(NotFound):
            manager.get("zeta")
    finally:
        manager.stop()


def test_an_ensemble_unloaded_on_purpose_stays_unloaded_when_its_member_returns(tmp_path: Path) -> None:
    _simple(tmp_path, "zeta")
    one_step_ensemble(tmp_path, "pipe", "zeta", ONNX)
    manager = _manager(tmp_path, "explicit")
    manager.start()
    try:
        manager.load("pipe")
        manager.unload("zeta")  # takes pipe down with it
        manager.load("zeta")  # and brings it back
        assert manager.get("pipe").version == 1
        manager.unload("zeta")
        manager.unload("pipe")  # now asked for: pipe no longer follows zeta
        manager.load("zeta")
        with pytest.raises(NotFound):
            manager.get("pipe")
    finally:
        manager.stop()


def test_a_start_up_model_without_folder_is_logged_as_not_found(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    manager = ModelManager(
        ServerSettings(model_repositories=(tmp_path,), model_control_mode="explicit", load_models=("ghost",))
    )
    manager.start()
    try:
        assert "failed to load 'ghost': model not found in any model repository" in caplog.text
        assert not manager.all_ready()
    finally:
        manager.stop()


def test_an_ensemble_tensor_with_reshape_has_the_reshaped_shape_inside(tmp_path: Path) -> None:
    _simple(tmp_path, "zeta")  # INPUT0, INPUT1 -> OUTPUT0, OUTPUT1, all [16]
    one_step_ensemble(tmp_path, "pipe", "zeta", ONNX)
    config = tmp_path / "pipe" / "config.pbtxt"
    # the request gives A as [4, 4]; inside the ensemble it is the [16] that zeta takes
    config.write_text(
        config.read_text().replace(
            '{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }',
            '{ name: "A" data_type: TYPE_INT32 dims: [ 4, 4 ] reshape: { shape: [ 16 ] } }',
        )
    )
    manager = _manager(tmp_path)
    manager.load_all()
    try:
        assert manager.get("pipe").config.input[0].reshape.shape == [16]
    finally:
        manager.stop()
