"""Serving framework models in-process: a repository loaded by a ModelManager, requests through the
Engine (request checks, scheduler, backend), and an instance's execute() called with several requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from nereid.backends import BackendRequest, InstanceSpec, get_backend
from nereid.backends.base import BackendResult
from nereid.core.engine import Engine
from nereid.datatypes import wire_datatype
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from nereid.types import InferRequest, InferTensor


def model_dir(root: Path, name: str, config: str | None) -> Path:
    """`root/name/1/`, with `config.pbtxt` beside it when given (None: auto-completed entirely)."""
    version = root / name / "1"
    version.mkdir(parents=True)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    return version


@contextmanager
def serving(root: Path, **settings: object) -> Iterator[Engine]:
    manager = ModelManager(ServerSettings(model_repositories=(root,), **settings))  # type: ignore[arg-type]
    engine = Engine(manager._settings, manager)
    try:
        manager.start(engine)
        yield engine
    finally:
        manager.stop()


def failure(engine: Engine, name: str) -> str:
    """Why the model did not load."""
    (row,) = [r for r in engine.models.index() if r["name"] == name]
    assert row["state"] == "UNAVAILABLE", row
    return str(row["reason"])


def infer(engine: Engine, name: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = [
        InferTensor(n, wire_datatype(a.dtype), tuple(a.shape), np.ascontiguousarray(a))
        for n, a in inputs.items()
    ]
    response = asyncio.run(engine.infer(InferRequest(name, "", tensors)))
    return {t.name: t.data for t in response.outputs}


def infer_concurrently(
    engine: Engine, name: str, batches: Sequence[Mapping[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    """Several requests in flight at once, as the dynamic batcher sees them."""

    async def all_of_them() -> list:
        requests = [
            InferRequest(
                name,
                "",
                [
                    InferTensor(n, wire_datatype(a.dtype), tuple(a.shape), np.ascontiguousarray(a))
                    for n, a in inputs.items()
                ],
            )
            for inputs in batches
        ]
        return list(await asyncio.gather(*(engine.infer(r) for r in requests)))

    return [{t.name: t.data for t in response.outputs} for response in asyncio.run(all_of_them())]


def execute_together(
    engine: Engine, name: str, batches: Sequence[Mapping[str, np.ndarray]]
) -> list[BackendResult]:
    """One execute() call of a fresh instance of the loaded model with one request per batch."""
    version = engine.models.get(name)
    config = version.config
    backend = get_backend(config.backend)
    model_path = Path(engine.models._settings.model_repositories[0]) / name
    spec = InstanceSpec(
        model_name=name,
        version=version.version,
        config=config,
        model_dir=model_path,
        version_dir=model_path / str(version.version),
        model_file=model_path / str(version.version) / config.default_model_filename,
        instance_name=f"{name}_direct",
        kind="CPU",
        device_id=0,
    )
    instance = backend.create_instance(spec)
    try:
        requests = [BackendRequest(dict(b), tuple(version.output_names)) for b in batches]
        return instance.execute(requests)  # type: ignore[union-attr]
    finally:
        instance.close()


def outputs_of(result: BackendResult) -> dict[str, np.ndarray]:
    assert isinstance(result, dict), f"the request failed: {result}"
    return result
