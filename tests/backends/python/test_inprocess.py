"""EXECUTION_MODE thread in a ModelManager: model.py in this very process, on its instances' threads."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nereid.backends.python.worker import pb_utils
from nereid.errors import InternalError, ModelConfigError
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.backends.python.conftest import EXAMPLES, MODELS, infer, request, worker_pids

STRINGS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

WHO = "{who}"


class TritonPythonModel:
    def execute(self, requests):
        out = np.array([WHO, "second"], dtype=np.object_)  # str elements, as models often build them
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
"""
STRINGS_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 2 ] }} ]
"""
ECHO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]) for x in inputs]
"""
ECHO_CONFIG = """name: "echo_fp32"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# Answers requests whose input starts with 1 with an error, with 2 with a non-Tensor among the output
# tensors, the others with their input.
CHECKED_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x[0] == 1.0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("refused")))
            elif x[0] == 2.0:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x), "not a tensor"]))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return responses
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("inprocess")
    shutil.copytree(EXAMPLES / "simple_identity", repository / "simple_identity")
    shutil.copytree(MODELS / "ready_flag", repository / "ready_flag")
    for name in ("strings_a", "strings_b"):  # two models whose files are both model.py
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(STRINGS_MODEL.format(who=name))
        (repository / name / "config.pbtxt").write_text(STRINGS_CONFIG.format(name=name))
    (repository / "echo_fp32" / "1").mkdir(parents=True)
    (repository / "echo_fp32" / "1" / "model.py").write_text(ECHO_MODEL)
    (repository / "echo_fp32" / "config.pbtxt").write_text(ECHO_CONFIG)
    (repository / "checked" / "1").mkdir(parents=True)
    (repository / "checked" / "1" / "model.py").write_text(CHECKED_MODEL)
    (repository / "checked" / "config.pbtxt").write_text(ECHO_CONFIG.replace("echo_fp32", "checked"))
    return repository


@pytest.fixture(scope="module")
def manager(repository: Path) -> Iterator[ModelManager]:
    before = worker_pids()
    manager = ModelManager(
        ServerSettings(
            model_repositories=(repository,), backend_config={"python": {"execution-mode": "thread"}}
        )
    )
    manager.start()
    try:
        assert worker_pids() == before  # auto-complete's worker is not kept for thread-mode instances
        yield manager
    finally:
        manager.stop()
        pb_utils.set_default_host(None)  # this process is a test's again, with no server in it


def test_inputs_reach_the_model_and_come_back_without_copies(manager: ModelManager) -> None:
    strings = np.array([[b"a", b"bc"]], dtype=np.object_)
    outputs = infer(manager, "simple_identity", {"INPUT0": strings})
    assert outputs["OUTPUT0"] is strings


def test_misaligned_inputs_reach_the_model_as_aligned_copies(manager: ModelManager) -> None:
    # binary data read in place from an HTTP body starts wherever the JSON header ends
    body = b"{" + np.arange(4, dtype=np.float32).tobytes()
    misaligned = np.ndarray((4,), np.float32, body, 1)
    assert not misaligned.flags.aligned
    echoed = infer(manager, "echo_fp32", {"IN": misaligned})["OUT"]
    assert echoed.flags.aligned and echoed.tolist() == [0.0, 1.0, 2.0, 3.0]
    aligned = np.arange(4, dtype=np.float32)
    assert infer(manager, "echo_fp32", {"IN": aligned})["OUT"] is aligned  # no copy where none is needed


def test_responses_are_checked_before_their_tensors_are_read(manager: ModelManager) -> None:
    value = np.zeros(4, np.float32)
    assert infer(manager, "checked", {"IN": value})["OUT"] is value
    # an error response is the request's error
    with pytest.raises(InternalError, match="^refused$"):
        infer(manager, "checked", {"IN": value + 1})
    # a non-Tensor among a response's tensors fails the execution, as in a worker
    with pytest.raises(InternalError, match="output_tensors must hold pb_utils.Tensor objects"):
        infer(manager, "checked", {"IN": value + 2})


def test_models_with_files_of_one_name_keep_their_own_modules(manager: ModelManager) -> None:
    a = infer(manager, "strings_a", {"IN": np.array([1], np.int32)})["OUT"]
    b = infer(manager, "strings_b", {"IN": np.array([1], np.int32)})["OUT"]
    assert a.tolist() == [b"strings_a", b"second"]  # str elements become bytes, as from a worker
    assert b.tolist() == [b"strings_b", b"second"]


def test_executions_run_on_the_instance_thread_never_inline(
    manager: ModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = manager.get("ready_flag")
    pool = version.scheduler.pool  # type: ignore[attr-defined]
    (instance,) = pool.instances
    threads: list[int] = []
    execute = instance.execute
    monkeypatch.setattr(
        instance, "execute", lambda requests: threads.append(threading.get_ident()) or execute(requests)
    )
    loop_threads: list[int] = []

    async def run_many() -> None:
        loop_threads.append(threading.get_ident())
        for _ in range(50):
            await version.scheduler.execute(request({"INPUT0": np.array([1], np.int32)}, ("OUTPUT0",)))

    asyncio.run(run_many())
    assert len(threads) == 50 and loop_threads[0] not in threads  # fast as it is, never on the event loop
    assert pool.inline_index() == -1


def test_is_ready_is_the_models_own(manager: ModelManager, repository: Path) -> None:
    version = manager.get("ready_flag")
    assert asyncio.run(version.scheduler.model_ready())
    marker = repository / "ready_flag" / "not_ready"
    marker.touch()
    try:
        assert not asyncio.run(version.scheduler.model_ready())
    finally:
        marker.unlink()
    assert asyncio.run(version.scheduler.model_ready())


def test_an_unknown_execution_mode_is_refused() -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    from nereid.backends.python import execution_mode

    config = mc.ModelConfig(name="m")
    config.parameters["EXECUTION_MODE"].string_value = "fiber"
    with pytest.raises(ModelConfigError, match="'EXECUTION_MODE' must be 'process' or 'thread', got 'fiber'"):
        execution_mode(config, {})
    assert execution_mode(mc.ModelConfig(name="m"), {"execution-mode": "thread"}) == "thread"
    assert execution_mode(mc.ModelConfig(name="m"), {}) == "process"
