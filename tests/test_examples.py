"""The example model repository builds reproducibly and its ONNX models compute what Triton's do."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
COMMITTED = EXAMPLES / "model_repository"


def _load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_model_repository", EXAMPLES / "build_model_repository.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model_repository")
    _load_builder().build_model_repository(out)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _run(repo: Path, model: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(repo / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    outputs: list[np.ndarray] = session.run(["OUTPUT0", "OUTPUT1"][: len(session.get_outputs())], feeds)
    return outputs


def test_committed_repository_in_sync(built: Path, tmp_path: Path) -> None:
    fresh = _files(built)
    assert set(fresh) == {
        f"{model}/{rel}"
        for model in ("simple", "simple_int8", "simple_string", "simple_classifier")
        for rel in ("config.pbtxt", "1/model.onnx")
    } | {"simple_classifier/labels.txt"}
    assert _files(COMMITTED) == fresh, "run: python examples/build_model_repository.py"
    _load_builder().build_model_repository(tmp_path)
    assert _files(tmp_path) == fresh  # deterministic


def test_simple(built: Path) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    total, diff = _run(built, "simple", {"INPUT0": a, "INPUT1": b})
    assert total.dtype == np.int32 and total.shape == (2, 16)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(diff, a - b)


def test_simple_int8_wraps(built: Path) -> None:
    a = np.array([[100, -100, 127, -128] * 4], dtype=np.int8)
    b = np.array([[100, 100, 1, 1] * 4], dtype=np.int8)
    total, diff = _run(built, "simple_int8", {"INPUT0": a, "INPUT1": b})
    assert total.dtype == np.int8
    np.testing.assert_array_equal(total[0, :4], [-56, 0, -128, -127])
    np.testing.assert_array_equal(diff[0, :4], [0, 56, 126, 127])


def test_simple_string_decimal(built: Path) -> None:
    # onnxruntime wants str objects here; bytes objects make the Cast fail.
    a = np.array([[str(i) for i in range(16)]] * 2, dtype=object)
    b = np.array([["1"] * 16, ["-7"] * 16], dtype=object)
    total, diff = _run(built, "simple_string", {"INPUT0": a, "INPUT1": b})
    assert total.shape == (2, 16)
    assert total[0, :3].tolist() == ["1", "2", "3"]
    assert diff[0, :3].tolist() == ["-1", "0", "1"]
    assert total[1, :3].tolist() == ["-7", "-6", "-5"]
    assert diff[1, 15] == "22"


def test_simple_classifier_softmax(built: Path) -> None:
    x = np.array([[0.0, 1.0, 2.0, 3.0], [5.0, 5.0, 5.0, 5.0]], dtype=np.float32)
    (probs,) = _run(built, "simple_classifier", {"INPUT0": x})
    np.testing.assert_allclose(probs.sum(axis=1), [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(probs[1], [0.25] * 4, rtol=1e-6)
    assert probs[0].argmax() == 3
    labels = (built / "simple_classifier" / "labels.txt").read_text().splitlines()
    assert labels == ["cat", "dog", "bird", "fish"]
    assert 'label_filename: "labels.txt"' in (built / "simple_classifier" / "config.pbtxt").read_text()
