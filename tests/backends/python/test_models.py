"""Python models served through real worker processes: what model code sees, and what the server gets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from nereid.backends.base import BackendResult
from nereid.backends.python.instance import PythonInstance
from nereid.errors import InvalidArgument
from nereid.repository import ModelManager
from tests.backends.python.conftest import command, infer, request


def _info(outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(outputs["INFO"][0][0])
    return info


def test_add_sub(manager: ModelManager) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    outputs = infer(manager, "add_sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
    assert outputs["OUTPUT0"].dtype == np.float32 and outputs["OUTPUT0"].shape == (2, 16)


def test_initialize_gets_triton_args(manager: ModelManager, repository: Any) -> None:
    info = _info(infer(manager, "introspect", {"INPUT0": np.ones((1, 3), np.float32)}))
    assert info["args"] == {
        "model_instance_kind": "CPU",
        "model_instance_name": info["args"]["model_instance_name"],
        "model_instance_device_id": "0",
        "model_repository": str(repository / "introspect"),
        "model_version": "1",
        "model_name": "introspect",
    }
    assert info["args"]["model_instance_name"] in ("introspect_0_0", "introspect_0_1")  # group "introspect_0"
    assert info["config_name"] == "introspect" and info["max_batch_size"] == 4
    assert info["helper"] == 42  # a module beside model.py imports
    assert info["model_dir"] == str(repository / "introspect" / "1")
    assert info["module"] == "1.model"


def test_requests_carry_id_parameters_sequence_and_outputs(manager: ModelManager) -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    outputs = infer(
        manager,
        "introspect",
        {"INPUT0": x},
        outputs=("INFO",),
        id="req-9",
        parameters={"custom": "v", "n": 3, "b": True},
        correlation_id="seq-a",
        flags=3,
        timeout_us=5000,
    )
    assert set(outputs) == {"INFO"}  # DOUBLE was not asked for, so it does not cross back
    info = _info(outputs)
    assert info["request_id"] == "req-9"
    assert json.loads(info["parameters"]) == {"custom": "v", "n": 3, "b": True}
    assert info["correlation_id"] == "seq-a" and info["flags"] == 3 and info["timeout"] == 5000
    assert info["requested"] == ["INFO"]
    assert info["input_names"] == ["INPUT0"] and info["shape"] == [1, 2]
    assert info["triton_dtype"] == 11 and info["is_cpu"] is True  # TYPE_FP32


def test_several_requests_in_one_execute_get_one_response_each(manager: ModelManager) -> None:
    """As the dynamic batcher will send them: one execute, one response per request, in order."""
    instance = manager.get("faulty").scheduler.pool.instances[0]
    assert isinstance(instance, PythonInstance)

    async def run() -> list[BackendResult] | BaseException:
        future: asyncio.Future[list[BackendResult] | BaseException] = (
            asyncio.get_running_loop().create_future()
        )
        requests = [request(command(c), ("OUTPUT0",)) for c in ("first", "error", "third")]
        instance.submit(requests, future.set_result)
        return await future

    first, error, third = asyncio.run(run())  # type: ignore[misc]
    assert isinstance(first, dict) and first["OUTPUT0"][0] == b"first"
    assert isinstance(error, InvalidArgument) and error.message == "the model refused this request"
    assert isinstance(third, dict) and third["OUTPUT0"][0] == b"third"


def test_instances_run_in_parallel(manager: ModelManager) -> None:
    """instance_group count 2: two workers, two executions at once."""
    x = {"INPUT0": np.ones((1, 1), np.float32)}
    version = manager.get("introspect")

    async def both() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(
            *[version.scheduler.execute(request(x, ("INFO",), parameters={"sleep": "0.3"})) for _ in range(2)]
        )

    first, second = (_info(outputs) for outputs in asyncio.run(both()))
    assert first["pid"] != second["pid"]
    assert first["start"] < second["end"] and second["start"] < first["end"]


def test_auto_complete_config_and_async_execute(manager: ModelManager) -> None:
    config = manager.get("auto").config_json
    assert config["max_batch_size"] == 8
    assert config["input"][0]["name"] == "INPUT0" and config["input"][0]["dims"] == [3]
    assert config["output"][0]["data_type"] == "TYPE_INT64"
    assert config["dynamic_batching"]["preferred_batch_size"] == [8]  # as Triton fills it in
    assert config["backend"] == "python" and config["platform"] == "" and config["name"] == "auto"
    outputs = infer(manager, "auto", {"INPUT0": np.array([[1, 2, 3]], dtype=np.int64)})
    np.testing.assert_array_equal(outputs["OUTPUT0"], [[2, 3, 4]])


def test_large_tensors_grow_the_arenas(manager: ModelManager) -> None:
    floats = np.arange(3_000_000, dtype=np.float32)  # 12 MB, beyond the 1 MiB arenas
    strings = np.array([b"x" * 1000 + str(i).encode() for i in range(3000)], dtype=np.object_)
    for _ in range(2):  # twice: both pipeline slots grow
        outputs = infer(manager, "big", {"FLOATS": floats, "STRINGS": strings})
        np.testing.assert_array_equal(outputs["FLOATS_OUT"], floats[::-1])
        assert list(outputs["STRINGS_OUT"]) == list(strings[::-1])
    small = infer(manager, "big", {"FLOATS": floats[:3], "STRINGS": strings[:2]})
    np.testing.assert_array_equal(small["FLOATS_OUT"], [2.0, 1.0, 0.0])


def test_model_is_ready_decides_readiness(manager: ModelManager, repository: Any) -> None:
    from nereid.core.engine import Engine

    engine = Engine(manager._settings, manager)
    assert asyncio.run(engine.model_ready("ready_flag"))
    marker = repository / "ready_flag" / "not_ready"
    marker.touch()
    try:
        assert not asyncio.run(engine.model_ready("ready_flag"))
    finally:
        marker.unlink()
    assert asyncio.run(engine.model_ready("ready_flag"))


def test_a_failing_initialize_fails_the_load_with_the_traceback(manager: ModelManager) -> None:
    (row,) = [r for r in manager.index() if r["name"] == "init_fails"]
    assert row["state"] == "UNAVAILABLE"
    assert row["reason"].startswith("RuntimeError: no weights here\n\nAt:\n")
    assert "init_fails/1/model.py(3): initialize" in row["reason"]


@pytest.mark.parametrize("name", ["add_sub", "faulty", "introspect"])
def test_loaded_models_are_ready(manager: ModelManager, name: str) -> None:
    assert manager.is_ready(name)
