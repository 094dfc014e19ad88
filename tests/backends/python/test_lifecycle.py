"""Loading and unloading Python models: workers and shared memory go away, environments are honoured."""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from nereid.backends.python.environment import worker_python
from nereid.errors import ModelConfigError
from tests.backends.python.conftest import copy_models, infer, manager_for, worker_pids

CYCLES = 50


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shared_memory_mappings() -> list[str]:
    """This process's mappings of shared memory: POSIX (/dev/shm) or anonymous (memfd). (The machine's
    /dev/shm may change meanwhile under other programs; what this process maps is ours alone.)"""
    with open("/proc/self/maps") as maps:
        return sorted(line.split()[-1] for line in maps if "/dev/shm/" in line or "/memfd:" in line)


def test_load_unload_cycles_leave_no_workers_descriptors_or_shared_memory(tmp_path: Path) -> None:
    repository = copy_models(tmp_path, "add_sub")
    manager = manager_for(repository, model_control_mode="explicit")
    a = np.ones((1, 16), np.float32)
    others = worker_pids()  # of models other tests loaded
    try:

        def cycle() -> None:
            manager.load("add_sub")
            assert len(worker_pids() - others) == 1
            np.testing.assert_array_equal(
                infer(manager, "add_sub", {"INPUT0": a, "INPUT1": a})["OUTPUT0"], a + a
            )
            manager.unload("add_sub")

        cycle()  # the first cycle imports what later ones reuse
        gc.collect()  # garbage from earlier tests, closing its descriptors now rather than mid-count
        fds, shm, threads = _open_fds(), _shared_memory_mappings(), threading.active_count()
        for _ in range(CYCLES - 1):
            cycle()
        assert worker_pids() == others
        assert _open_fds() == fds
        assert _shared_memory_mappings() == shm
        assert threading.active_count() <= threads
    finally:
        manager.stop()


def test_stopping_the_server_finalizes_and_ends_every_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    others = worker_pids()
    with caplog.at_level(logging.INFO, logger="nereid.backends.python"):
        manager = manager_for(copy_models(tmp_path, "add_sub", "introspect"))
    assert len(worker_pids() - others) == 3  # introspect has two instances
    # pb_utils.Logger lines reach the server's log as from the model's file and line, as in Triton
    assert any(
        r.filename == "model.py" and r.lineno > 0 and r.getMessage() == "initialized introspect_0_0"
        for r in caplog.records
    ), caplog.text
    manager.stop()
    assert worker_pids() == others
    finalized = sorted(p.name for p in (tmp_path / "introspect").glob("finalized_*"))
    assert finalized == ["finalized_introspect_0_0", "finalized_introspect_0_1"]


def _environment(root: Path) -> Path:
    """A small environment with its own interpreter that sees this one's packages (numpy). Created from
    a virtual environment, a venv's system site-packages are the base interpreter's, not this one's: a
    .pth file points at ours."""
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--copies", str(env)], check=True)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()}
    (site_packages / "server_packages.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return env


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "archive"])
def test_execution_env_path_runs_the_workers_with_that_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repository = copy_models(tmp_path / "models", "introspect")
    model_dir = repository / "introspect"
    env = _environment(tmp_path)
    if packed:
        with tarfile.open(model_dir / "env.tar.gz", "w:gz") as archive:
            archive.add(env, arcname=".")
        shutil.rmtree(env)
        location = "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    else:
        location = str(env)
    config = (model_dir / "config.pbtxt").read_text()
    config += f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{location}" }} }}\n'
    (model_dir / "config.pbtxt").write_text(config)
    manager = manager_for(repository)
    try:
        outputs = infer(manager, "introspect", {"INPUT0": np.ones((1, 1), np.float32)})
        executable = Path(json.loads(outputs["INFO"][0][0])["executable"])
        if packed:
            assert executable.is_relative_to(tmp_path / "cache" / "nereid" / "python-envs")
        else:
            assert executable.parent == env / "bin"
    finally:
        manager.stop()


def test_execution_env_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="neither a folder nor an archive"):
        worker_python("$$TRITON_MODEL_DIRECTORY/missing.tar.gz", tmp_path)
    assert worker_python("", tmp_path) == (sys.executable, None)
