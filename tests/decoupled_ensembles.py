"""A test repository of ensembles with a decoupled step (the `repeat` Python model: one response per
element of IN, then the final flag alone), so that the real Triton serves it too: the decoupled step at
the end, in the middle, an ensemble declared decoupled without a decoupled step, and one refused at load
because a step mixes the decoupled step's outputs with the ensemble's inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT
from tests.ensembles import MODELS, _ensemble, _step

REPEAT = ROOT / "tests" / "pipelines" / "models" / "repeat"
_INT = "data_type: TYPE_INT32 dims: [ 1 ]"
REPEAT_IO = (
    'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY_MS" data_type: TYPE_INT32 '
    "dims: [ 1 ] } ]"
)
REPEAT_STEP = _step("repeat", {"IN": "IN", "DELAY_MS": "DELAY_MS"}, {"OUT": "repeated", "IDX": "IDX"})
MIXED_ORIGINS = (
    "in ensemble mixed_origins, step of model 'mixed_origins' receives inputs originated from different "
    "decoupled models"
)


def _int_model(root: Path, name: str, operation: str, io: str) -> None:
    (root / name / "1").mkdir(parents=True)
    shutil.copy(MODELS / "int_ops.py", root / name / "1" / "model.py")
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{io}\n'
        f'parameters {{ key: "operation" value {{ string_value: "{operation}" }} }}\n'
    )


def decoupled_ensemble_repository(root: Path) -> Path:
    shutil.copytree(REPEAT, root / "repeat")
    (root / "late_echo" / "1").mkdir(parents=True)
    shutil.copy(MODELS / "late_echo.py", root / "late_echo" / "1" / "model.py")
    (root / "late_echo" / "config.pbtxt").write_text(
        f'name: "late_echo"\nbackend: "python"\nmax_batch_size: 0\n{REPEAT_IO}\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        "model_transaction_policy { decoupled: true }\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    _int_model(
        root,
        "times_ten",
        "times_ten",
        f'input [ {{ name: "INPUT0" {_INT} }} ]\noutput [ {{ name: "OUTPUT0" {_INT} }} ]',
    )
    _int_model(
        root,
        "add",
        "add",
        f'input [ {{ name: "A" {_INT} }}, {{ name: "B" {_INT} }} ]\noutput [ {{ name: "SUM" {_INT} }} ]',
    )
    outputs = f'output [ {{ name: "OUT" {_INT} }}, {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }} ]'
    # the decoupled step last: its every response is a response of the ensemble
    _ensemble(
        root,
        "repeat_tail",
        f"{REPEAT_IO}\n{outputs}",
        _step("repeat", {"IN": "IN", "DELAY_MS": "DELAY_MS"}, {"OUT": "OUT", "IDX": "IDX"}),
        max_batch_size=0,
    )
    # the decoupled step first: each of its responses goes through times_ten
    _ensemble(
        root,
        "repeat_scale",
        f"{REPEAT_IO}\n{outputs}",
        REPEAT_STEP + ", " + _step("times_ten", {"INPUT0": "repeated"}, {"OUTPUT0": "OUT"}),
        max_batch_size=0,
    )
    # declared decoupled, but no step is: Triton loads it as not decoupled
    _ensemble(
        root,
        "declared_decoupled",
        f'input [ {{ name: "X" {_INT} }} ]\noutput [ {{ name: "Y" {_INT} }} ]\n'
        "model_transaction_policy { decoupled: true }",
        _step("times_ten", {"INPUT0": "X"}, {"OUTPUT0": "Y"}),
        max_batch_size=0,
    )
    # add pairs a repeat response with the ensemble's own input: refused
    _ensemble(
        root,
        "mixed_origins",
        f'{REPEAT_IO}\ninput [ {{ name: "B" {_INT} }} ]\noutput [ {{ name: "SUM" {_INT} }} ]',
        _step("repeat", {"IN": "IN", "DELAY_MS": "DELAY_MS"}, {"OUT": "repeated"})
        + ", "
        + _step("add", {"A": "repeated", "B": "B"}, {"SUM": "SUM"}),
        max_batch_size=0,
    )
    return root
