"""Test repositories with ensembles: Python composing models (so that the real Triton serves them
too), a diamond-shaped ensemble, one with a Python and an ONNX step, and ensembles that must not load."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import EXAMPLES

MODELS = Path(__file__).parent / "ensemble_models"

_VECTOR = "data_type: TYPE_FP32 dims: [ 4 ]"


def _python_model(root: Path, name: str, operation: str, io: str, delay_s: float = 0.0) -> None:
    (root / name / "1").mkdir(parents=True)
    shutil.copy(MODELS / "arith.py", root / name / "1" / "model.py")
    parameters = f'parameters {{ key: "operation" value {{ string_value: "{operation}" }} }}\n'
    if delay_s:
        parameters += f'parameters {{ key: "delay_s" value {{ string_value: "{delay_s}" }} }}\n'
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{io}\n{parameters}'
    )


def _ensemble(root: Path, name: str, io: str, steps: str, max_batch_size: int = 8) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n{io}\n'
        f"ensemble_scheduling {{ step [ {steps} ] }}\n"
    )


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


UNARY_IO = (
    f'input [ {{ name: "INPUT0" {_VECTOR} }} ]\n'
    f'output [ {{ name: "OUTPUT0" {_VECTOR} }}, {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }} ]'
)
ENSEMBLE_IO = f'input [ {{ name: "IN" {_VECTOR} }} ]\noutput [ {{ name: "OUT" {_VECTOR} }} ]'


def python_members(root: Path, delay_s: float = 0.0) -> None:
    """add_one and double (each taking `delay_s`), sum of two vectors, fail, and sequence."""
    _python_model(root, "add_one", "add_one", UNARY_IO, delay_s)
    _python_model(root, "double", "double", UNARY_IO, delay_s)
    _python_model(
        root,
        "sum",
        "sum",
        f'input [ {{ name: "A" {_VECTOR} }}, {{ name: "B" {_VECTOR} }} ]\noutput [ {{ name: "SUM" {_VECTOR} }} ]',
    )
    _python_model(
        root,
        "fail",
        "fail",
        f'input [ {{ name: "INPUT0" {_VECTOR} }} ]\noutput [ {{ name: "OUTPUT0" {_VECTOR} }} ]',
    )
    _python_model(
        root,
        "sequence",
        "sequence",
        f'input [ {{ name: "INPUT0" {_VECTOR} }} ]\noutput [ {{ name: "OUTPUT0" {_VECTOR} }}, '
        '{ name: "CORRID" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "FLAGS" data_type: TYPE_INT64 dims: [ 1 ] } ]',
    )


def valid_ensembles(root: Path) -> None:
    """diamond: OUT = (IN + 1) + (IN * 2), the two branches independent; plus a chain, a failing
    step, and sequence parameters seen by a step."""
    _ensemble(
        root,
        "diamond",
        ENSEMBLE_IO.replace(
            "output [",
            'output [ { name: "SPAN_A" data_type: TYPE_FP64 dims: [ 2 ] }, '
            '{ name: "SPAN_B" data_type: TYPE_FP64 dims: [ 2 ] }, ',
        ),
        ", ".join(
            [
                _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "a", "SPAN": "SPAN_A"}),
                _step("double", {"INPUT0": "IN"}, {"OUTPUT0": "b", "SPAN": "SPAN_B"}),
                _step("sum", {"A": "a", "B": "b"}, {"SUM": "OUT"}),
            ]
        ),
    )
    _ensemble(
        root,
        "chain",
        ENSEMBLE_IO,
        ", ".join(
            [
                _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "a"}),
                _step("double", {"INPUT0": "a"}, {"OUTPUT0": "OUT"}, version=1),
            ]
        ),
    )
    _ensemble(  # an ensemble as a step: ((IN + 1) * 2) + 1
        root,
        "nested",
        ENSEMBLE_IO,
        ", ".join(
            [
                _step("chain", {"IN": "IN"}, {"OUT": "c"}),
                _step("add_one", {"INPUT0": "c"}, {"OUTPUT0": "OUT"}),
            ]
        ),
    )
    _ensemble(root, "step_fails", ENSEMBLE_IO, _step("fail", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}))
    _ensemble(
        root,
        "sequence_through",
        ENSEMBLE_IO.replace("output [", 'output [ { name: "CORRID" data_type: TYPE_INT64 dims: [ 1 ] }, '),
        _step("sequence", {"INPUT0": "IN"}, {"OUTPUT0": "OUT", "CORRID": "CORRID"}),
    )


# name -> (steps, the error Triton reports, word for word)
INVALID_ENSEMBLES = {
    "unknown_model": (
        _step("nope", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}),
        "ensemble unknown_model contains models that are not available or ambiguous: nope",
    ),
    "unmapped_input": (
        _step("sum", {"A": "IN"}, {"SUM": "OUT"}),
        "in ensemble unmapped_input, input B in model sum is not mapped to any ensemble tensors",
    ),
    "wrong_input": (
        _step("add_one", {"NOPE": "IN"}, {"OUTPUT0": "OUT"}),
        "in ensemble wrong_input, ensemble tensor IN is mapping to non-existing input NOPE in model add_one",
    ),
    "wrong_output": (
        _step("add_one", {"INPUT0": "IN"}, {"NOPE": "OUT"}),
        "in ensemble wrong_output, ensemble tensor OUT is mapped from non-existing output NOPE in model add_one",
    ),
    "missing_version": (
        _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}, version=7),
        "ensemble 'missing_version' depends on 'add_one' whose required version 7 is not loaded.",
    ),
    "type_mismatch": (
        _step("sequence", {"INPUT0": "IN"}, {"OUTPUT0": "x", "CORRID": "y"})
        + ", "
        + _step("sum", {"A": "IN", "B": "y"}, {"SUM": "OUT"}),
        "in ensemble type_mismatch, ensemble tensor y: inconsistent data type: TYPE_INT64 is inferred from "
        "model sequence while TYPE_FP32 is inferred from model sum",
    ),
    "shape_mismatch": (
        _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}),
        "in ensemble shape_mismatch, ensemble tensor IN: inconsistent shape: [-1,3] is inferred from model "
        "shape_mismatch while [-1,4] is inferred from model add_one",
    ),
    "unused_input": (
        _step("add_one", {"INPUT0": "x"}, {"OUTPUT0": "OUT"}),
        "ensemble input 'IN' for ensemble unused_input' is not used",
    ),
    "no_steps": ("", "must specify 'step' for ensemble 'no_steps'"),
}


def invalid_ensembles(root: Path) -> None:
    for name, (steps, _) in INVALID_ENSEMBLES.items():
        io = ENSEMBLE_IO.replace("dims: [ 4 ] } ]\noutput", "dims: [ 3 ] } ]\noutput")
        _ensemble(root, name, io if name == "shape_mismatch" else ENSEMBLE_IO, steps)
    _ensemble(
        root,
        "cycle",
        ENSEMBLE_IO,
        ", ".join(
            [
                _step("add_one", {"INPUT0": "x"}, {"OUTPUT0": "y"}),
                _step("double", {"INPUT0": "y"}, {"OUTPUT0": "x"}),
                _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}),
            ]
        ),
    )
    # a batch size larger than the steps allow
    _ensemble(
        root, "too_large_batch", ENSEMBLE_IO, _step("add_one", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}), 16
    )


# Triton says only this much; Nereid adds where the cycle is.
CYCLE = "ensemble tensor 'x' is unused in ensemble 'cycle'"
TOO_LARGE_BATCH = (
    "ensemble too_large_batch allows maximum batch size 16, but it contains model add_one which only "
    "allows maximum batch size to be 8"
)


def python_ensemble_repository(root: Path, delay_s: float = 0.0) -> Path:
    python_members(root, delay_s)
    valid_ensembles(root)
    return root


def mixed_ensemble(root: Path) -> None:
    """to_int (Python) then `simple` (ONNX): OUTPUT0 = 2 * round(X), OUTPUT1 = 0."""
    shutil.copytree(EXAMPLES / "simple", root / "simple")
    (root / "to_int" / "1").mkdir(parents=True)
    (root / "to_int" / "1" / "model.py").write_text(
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [\n"
        "            pb_utils.InferenceResponse([pb_utils.Tensor(\n"
        '                "Y", np.rint(pb_utils.get_input_tensor_by_name(r, "X").as_numpy()).astype(np.int32))])\n'
        "            for r in requests\n"
        "        ]\n"
    )
    (root / "to_int" / "config.pbtxt").write_text(
        'name: "to_int"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
    )
    _ensemble(
        root,
        "python_then_onnx",
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "TWICE" data_type: TYPE_INT32 dims: [ 16 ] }, '
        '{ name: "ZERO" data_type: TYPE_INT32 dims: [ 16 ] } ]',
        _step("to_int", {"X": "X"}, {"Y": "y"})
        + ", "
        + _step("simple", {"INPUT0": "y", "INPUT1": "y"}, {"OUTPUT0": "TWICE", "OUTPUT1": "ZERO"}),
    )
