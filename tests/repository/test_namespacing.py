"""--model-namespacing, in process: the same model name in two repositories, ensemble steps that prefer
their own repository, names refused as ambiguous, explicit loads and polling; and the flag off unchanged.

Repository `a` holds the ONNX `simple` model (SUM = A + B, DIFF = A - B); each repository holds an ensemble
`member` over it, `a`'s passing its outputs through and `b`'s swapping them, so a response tells which
repository's `member` ran. `pipe` (in both) and `only_a` call `member`."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nereid.core.engine import Engine
from nereid.errors import InvalidArgument, NotFound, PollFailed
from nereid.repository import ModelManager
from nereid.settings import ServerSettings
from nereid.types import InferRequest, InferTensor
from tests.conftest import EXAMPLES
from tests.repository.test_ensemble_loading import NESTED, ONNX, one_step_ensemble

AMBIGUOUS = "There are 2 identifiers of model '{}' in global map, model namespace must be provided to resolve ambiguity."
X = np.arange(16, dtype=np.int32).reshape(1, 16)
Y = np.full((1, 16), 3, dtype=np.int32)


def namespaced_repositories(base: Path) -> tuple[Path, Path]:
    """The repositories `a` and `b` described above, under `base`."""
    a, b = base / "a", base / "b"
    shutil.copytree(EXAMPLES / "simple", a / "simple")
    one_step_ensemble(a, "member", "simple", ONNX)
    one_step_ensemble(b, "member", "simple", ONNX, swap=True)  # `simple` is only in `a`: the one there serves
    for root in (a, b):
        one_step_ensemble(root, "pipe", "member", NESTED)
    one_step_ensemble(a, "only_a", "member", NESTED)
    return a, b


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path]:
    return namespaced_repositories(tmp_path)


def serving(repos: tuple[Path, Path], mode: str, namespacing: bool = True) -> tuple[ModelManager, Engine]:
    settings = ServerSettings(
        model_repositories=repos,
        model_control_mode=mode,
        model_namespacing=namespacing,
        repository_poll_secs=3600,  # the tests call poll() themselves
        exit_timeout_secs=5,
    )
    manager = ModelManager(settings)
    engine = Engine(settings, manager)
    return manager, engine


@pytest.fixture
def polling(repos: tuple[Path, Path]) -> Iterator[tuple[ModelManager, Engine]]:
    manager, engine = serving(repos, "poll")
    manager.start(engine)
    try:
        yield manager, engine
    finally:
        manager.stop()


def infer(engine: Engine, name: str, namespace: str = "") -> str:
    """Which arithmetic the model did: 'add' (SUM = A + B) or 'sub' (SUM = A - B, outputs swapped).
    `namespace`: the repository preferred, as an ensemble's step prefers its own."""
    tensors = [InferTensor(n, "INT32", (1, 16), v) for n, v in (("A", X), ("B", Y))]
    response = asyncio.run(engine.infer(InferRequest(name, "", tensors, model_namespace=namespace)))
    total = {t.name: t.data for t in response.outputs}["SUM"]
    if np.array_equal(total, X + Y):
        return "add"
    assert np.array_equal(total, X - Y), total
    return "sub"


def test_the_same_name_in_two_repositories_serves_from_both(polling: tuple[ModelManager, Engine]) -> None:
    manager, _ = polling
    rows = [(row["name"], row["state"]) for row in manager.index()]
    assert rows.count(("member", "READY")) == 2 and rows.count(("pipe", "READY")) == 2
    assert manager.all_ready()


def test_ensemble_steps_run_the_model_of_their_own_repository(
    polling: tuple[ModelManager, Engine], repos: tuple[Path, Path]
) -> None:
    _, engine = polling
    a, b = repos
    assert infer(engine, "only_a") == "add"  # a's `member`, though b has one too
    assert infer(engine, "member", namespace=str(a)) == "add"
    # b's `member` runs `simple`, which only a holds: a name only one repository has serves every step.
    assert infer(engine, "member", namespace=str(b)) == "sub"


@pytest.mark.parametrize("name", ["member", "pipe"])
def test_a_name_in_two_repositories_is_refused_as_ambiguous(
    polling: tuple[ModelManager, Engine], name: str
) -> None:
    manager, engine = polling
    for ask in (lambda: infer(engine, name), lambda: manager.get(name), lambda: manager.loaded(name)):
        with pytest.raises(InvalidArgument) as caught:
            ask()
        assert caught.value.message == AMBIGUOUS.format(name)


def test_polling_a_model_removed_from_one_repository_hands_its_ensembles_to_its_namesake(
    polling: tuple[ModelManager, Engine], repos: tuple[Path, Path], tmp_path: Path
) -> None:
    manager, engine = polling
    a, _ = repos
    shutil.move(a / "member", tmp_path / "member")
    manager.poll()
    assert infer(engine, "member") == "sub"  # no longer ambiguous
    assert infer(engine, "only_a") == "sub"  # its step now runs b's `member`
    shutil.move(tmp_path / "member", a / "member")
    manager.poll()
    assert infer(engine, "only_a") == "add"  # and a's again once it is back
    with pytest.raises(InvalidArgument, match="ambiguity"):
        manager.get("member")


def test_an_explicit_load_loads_the_name_from_every_repository(repos: tuple[Path, Path]) -> None:
    manager, engine = serving(repos, "explicit")
    manager.start(engine)
    try:
        manager.load("pipe")  # both `pipe`s, with the `member`s they call and what those call
        rows = [(row["name"], row["state"]) for row in manager.index() if "state" in row]
        assert sorted(rows) == sorted(
            [("member", "READY")] * 2 + [("pipe", "READY")] * 2 + [("simple", "READY")]
        )
        assert infer(engine, "member", namespace=str(repos[1])) == "sub"
        manager.unload("member")  # every repository's, and the ensembles that call them
        with pytest.raises(NotFound):
            manager.get("pipe")
    finally:
        manager.stop()


def test_without_the_flag_a_name_in_two_repositories_is_still_refused(repos: tuple[Path, Path]) -> None:
    manager, engine = serving(repos, "explicit", namespacing=False)
    manager.start(engine)
    try:
        with pytest.raises(PollFailed, match="failed to load 'member', .*two or more repositories"):
            manager.load("member")
        with pytest.raises(InvalidArgument, match="not available or ambiguous: member"):
            manager.load("only_a")  # for want of `member`
    finally:
        manager.stop()
