"""Python-backend test models, loaded once into a ModelManager with real worker processes."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nereid.backends.base import BackendRequest, Outputs
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.conftest import ROOT

MODELS = Path(__file__).parent / "models"
EXAMPLES = ROOT / "examples" / "python_model_repository"
WORKER_MAIN = "nereid/backends/python/worker/__main__.py"


def copy_models(target: Path, *names: str) -> Path:
    """A private copy of test models (and the examples' add_sub), since tests leave marker files in them."""
    for name in names or [p.name for p in MODELS.iterdir()] + ["add_sub"]:
        source = MODELS / name if (MODELS / name).is_dir() else EXAMPLES / name
        shutil.copytree(source, target / name)
    return target


def manager_for(repository: Path, **settings: Any) -> ModelManager:
    backend_config = {"python": {"stub-timeout-seconds": "5"}}
    manager = ModelManager(
        ServerSettings(model_repositories=(repository,), backend_config=backend_config, **settings)
    )
    manager.start()
    return manager


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("python_models"))


@pytest.fixture(scope="session")
def manager(repository: Path) -> Iterator[ModelManager]:
    manager = manager_for(repository)
    try:
        yield manager
    finally:
        manager.stop()


def request(inputs: Mapping[str, np.ndarray], outputs: Sequence[str] = (), **fields: Any) -> BackendRequest:
    return BackendRequest(inputs, tuple(outputs), **fields)


def infer(manager: ModelManager, model: str, inputs: Mapping[str, np.ndarray], **fields: Any) -> Outputs:
    version = manager.get(model)
    outputs = fields.pop("outputs", version.output_names)
    return asyncio.run(version.scheduler.execute(request(inputs, outputs, **fields)))


def command(text: str) -> dict[str, np.ndarray]:
    """Inputs of the `faulty` model."""
    return {"INPUT0": np.array([text.encode()], dtype=np.object_)}


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll a condition until it holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} still false after {timeout} s")
        time.sleep(0.02)


def worker_pids() -> set[int]:
    """Worker processes that this test process started."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if parent == os.getpid() and WORKER_MAIN.encode() in cmdline:
            pids.add(int(entry))
    return pids
