"""model.py files written for NumPy 1 (np.NINF, np.NaN, np.float_ ...) run under NumPy 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nereid.backends.python.worker.numpy_compat import numpy1_aliases
from tests.backends.serving import infer, model_dir, serving

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        values = np.array([np.NINF, np.PINF, np.NaN], dtype=np.float_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", values.astype(np.float32))]) for _ in requests]
"""
CONFIG = """backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def test_a_numpy1_model_runs(tmp_path: Path) -> None:
    (model_dir(tmp_path, "old_numpy", CONFIG) / "model.py").write_text(MODEL)
    with serving(tmp_path) as engine:
        out = infer(engine, "old_numpy", {"IN": np.zeros(1, np.float32)})["OUT"]
    assert out[0] == -np.inf and out[1] == np.inf and np.isnan(out[2])


def test_the_aliases_are_numpy2_names() -> None:
    # Processes that import model.py get them: workers, and the server itself once a model runs in
    # thread mode (the same model.py runs in either mode).
    aliases = numpy1_aliases(np)
    assert aliases["float_"] is np.float64 and aliases["unicode_"] is np.str_
