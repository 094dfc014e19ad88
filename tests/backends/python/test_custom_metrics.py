"""pb_utils.MetricFamily from a real model, in both execution modes: values on the metrics endpoint,
Triton's refusals, a deleted family's metric, and the families gone once the model unloads."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import numpy as np
import pytest

from nereid.core.engine import Engine
from nereid.frontends.metrics import MetricsExporter
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from tests.backends.python.conftest import copy_models, request
from tests.conftest import PYTHON_EXECUTION_MODES


@pytest.fixture(scope="module", params=PYTHON_EXECUTION_MODES)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    repository = copy_models(tmp_path_factory.mktemp(f"metered_{request.param}"), "metered")
    settings = ServerSettings(
        model_repositories=(repository,),
        model_control_mode="explicit",
        load_models=("metered",),
        backend_config={"python": {"stub-timeout-seconds": "5", "execution-mode": request.param}},
    )
    manager = ModelManager(settings)
    engine = Engine(settings, manager)
    manager.start(engine)
    try:
        yield engine
    finally:
        manager.stop()


def _infer(manager: ModelManager, value: float) -> dict[str, np.ndarray]:
    version = manager.get("metered")
    inputs = {"IN": np.array([value], dtype=np.float32)}
    return asyncio.run(version.scheduler.execute(request(inputs, ("COUNT", "ERRORS"))))


def _metrics(engine: Engine) -> str:
    return MetricsExporter(engine, cpu_metrics=False, custom=engine.models.custom_metrics).render().decode()


def test_values_reach_the_metrics_endpoint(served: Engine) -> None:
    manager = served.models
    first = _infer(manager, 0.5)
    second = _infer(manager, 20.0)
    assert first["COUNT"].tolist() == [1.0] and second["COUNT"].tolist() == [2.0]
    text = _metrics(served)
    assert "# HELP metered_requests Requests seen by the model\n# TYPE metered_requests counter" in text
    assert 'metered_requests{kind="all",model="metered"} 2\n' in text
    assert "# TYPE metered_last_value gauge\nmetered_last_value 20\n" in text
    histogram = {
        line.split(" ")[0]: line.split(" ")[1]
        for line in text.splitlines()
        if line.startswith("metered_values")
    }
    assert histogram == {
        'metered_values_bucket{model="metered",le="1"}': "1",
        'metered_values_bucket{model="metered",le="10"}': "1",
        'metered_values_bucket{model="metered",le="+Inf"}': "2",
        'metered_values_sum{model="metered"}': "20.5",
        'metered_values_count{model="metered"}': "2",
    }


def test_operations_a_kind_lacks_are_refused_with_tritons_texts(served: Engine) -> None:
    errors = _infer(served.models, 1.0)["ERRORS"].tolist()
    assert errors == [
        b"Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        b"Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
        b"Error when creating MetricFamily: Family name already exists with different type",
    ]


def test_a_deleted_family_leaves_the_endpoint_and_the_rest_stays_until_unload(served: Engine) -> None:
    manager = served.models
    deleted = _infer(manager, -1.0)  # the model deletes its gauge's family, then uses its metric
    assert (
        deleted["ERRORS"][0]
        .decode()
        .startswith("Invalid metric operation as the corresponding 'MetricFamily' has been deleted.")
    )
    _infer(manager, 2.0)  # its release reaches the server no later than the next call
    text = _metrics(served)
    assert "metered_last_value" not in text and "metered_requests{" in text
    asyncio.run(served.unload_model("metered"))
    assert not re.search(r"^metered_", _metrics(served), re.M)
    assert served.models.custom_metrics.snapshot() == []
    asyncio.run(served.load_model("metered"))  # a new load starts from zero
    assert _infer(manager, 3.0)["COUNT"].tolist() == [1.0]


def test_load_durations_are_exported(served: Engine) -> None:
    match = re.search(
        r'^nv_model_load_duration_secs\{model="metered",version="1"\} (\S+)$', _metrics(served), re.M
    )
    assert match is not None and 0 < float(match.group(1)) < 60


def test_custom_families_need_a_server_that_serves_the_model() -> None:
    from nereid.backends.python.worker import pb_utils

    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.MetricFamily("no_server", "none", pb_utils.MetricFamily.COUNTER)
