"""The server-wide bound on model instances: checked before any instance starts, given back on unload."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from nereid.errors import InvalidArgument
from nereid.repository import ModelManager
from nereid.repository.instance_budget import InstanceBudget, default_max_instances
from nereid.settings import ServerSettings
from tests.conftest import ROOT, child_processes

PYTHON_EXAMPLES = ROOT / "examples" / "python_model_repository"


def test_the_default_follows_cpus_and_memory() -> None:
    assert default_max_instances(cpus=2, memory_bytes=24 << 30) == 512  # 256 per CPU
    assert default_max_instances(cpus=64, memory_bytes=4 << 30) == 85  # 48 MiB each
    assert default_max_instances(cpus=1, memory_bytes=512 << 20) == 16  # never under 16


def test_a_reservation_beyond_the_bound_is_refused_and_one_given_back_is_free_again() -> None:
    budget = InstanceBudget(10)
    release = budget.reserve(6, "model 'a' version 1")
    with pytest.raises(InvalidArgument, match=r"asks for 5 instances, but the server holds 6 of at most 10"):
        budget.reserve(5, "model 'b' version 1")
    release()
    release()  # once only
    assert budget.held == 0
    budget.reserve(10, "model 'b' version 1")
    assert budget.held == 10


@pytest.fixture
def python_models(tmp_path: Path) -> Iterator[ModelManager]:
    shutil.copytree(PYTHON_EXAMPLES / "simple_identity", tmp_path / "simple_identity")
    manager = ModelManager(
        ServerSettings(
            model_repositories=(tmp_path,),
            model_control_mode="explicit",
            load_models=("simple_identity",),
            max_model_instances=3,
            # no auto-complete worker, which would be kept for the next load of the model
            auto_complete_config=False,
        )
    )
    manager.start()
    yield manager
    manager.stop()


def _override(count: int) -> str:
    """simple_identity's config with `count` CPU instances, as a load request's 'config'."""
    return json.dumps(
        {
            "name": "simple_identity",
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [-1]}],
            "instance_group": [{"count": count, "kind": "KIND_CPU"}],
        }
    )


def test_a_load_beyond_the_bound_starts_nothing_and_the_serving_version_stays(
    python_models: ModelManager,
) -> None:
    serving = python_models.get("simple_identity")
    workers = set(child_processes(os.getpid()))
    with pytest.raises(Exception, match=r"asks for 1000000 instances.*--max-model-instances"):
        python_models.load("simple_identity", config=_override(1_000_000))
    started = set(child_processes(os.getpid())) - workers
    assert not started, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in started]  # not one worker
    assert python_models.get("simple_identity") is serving
    assert python_models.instances.held == 1


def test_instances_are_given_back_when_a_version_unloads(python_models: ModelManager) -> None:
    python_models.load("simple_identity", config=_override(2))  # 1 serving + 2 new fit in 3
    assert python_models.instances.held == 2  # the version it replaced gave its one back
    python_models.unload("simple_identity")
    assert python_models.instances.held == 0
    python_models.load("simple_identity", config=_override(3))
    assert python_models.instances.held == 3


_FAILS_FIRST = """
import os
import time


class TritonPythonModel:
    def initialize(self, args):
        with open(os.path.join(args["model_repository"], "starts"), "a") as starts:
            starts.write(args["model_instance_name"] + "\\n")
        if args["model_instance_name"].rsplit("_", 1)[1] == "0":
            raise RuntimeError("instance 0 cannot start")
        time.sleep(3)

    def execute(self, requests):
        return []
"""


def test_a_start_that_fails_midway_starts_no_more_instances_and_stops_those_started(tmp_path: Path) -> None:
    model = tmp_path / "failing"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(_FAILS_FIRST)
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }]\n'
        "instance_group [{ count: 24 kind: KIND_CPU }]\n"
    )
    manager = ModelManager(ServerSettings(model_repositories=(tmp_path,), model_control_mode="explicit"))
    manager.start()
    try:
        workers = set(child_processes(os.getpid()))
        with pytest.raises(Exception, match="instance 0 cannot start"):
            manager.load("failing")
        assert set(child_processes(os.getpid())) <= workers  # every worker it started has stopped
        assert manager.instances.held == 0
    finally:
        manager.stop()
    started = (model / "starts").read_text().split()
    # 8 start side by side; once the first fails, the rest never start (but the one a freed thread may
    # have taken meanwhile)
    assert len(started) <= 9, started
