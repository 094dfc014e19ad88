"""Build the OCR example's two ONNX models (made with onnx.helper; nothing is downloaded).

text_detection: PIXELS [H, W] -> TEXT_MAP [H, W], sigmoid(10 * (3x3 ink sum - 0.5)): near 1 wherever
  there is ink nearby, a text probability map.
text_recognition: GLYPHS [N, 35] -> PROBS [N, 36], softmax over the cosine similarity of each glyph to
  the font's templates (left-aligned, as the crop step samples them).

    python tests/ocr_toy/build_models.py [--output DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import font  # noqa: E402  (beside this script)

OPSET = 17
IR_VERSION = 8
DEFAULT_OUTPUT = HERE / "model_repository"


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="nereid-examples",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _constant(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def text_detection() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Unsqueeze", ["PIXELS", "axes"], ["image"]),
        helper.make_node("Conv", ["image", "kernel"], ["ink_nearby"], pads=[1, 1, 1, 1]),
        helper.make_node("Sub", ["ink_nearby", "half"], ["centered"]),
        helper.make_node("Mul", ["centered", "sharpness"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["probability"]),
        helper.make_node("Squeeze", ["probability", "axes"], ["TEXT_MAP"]),
    ]
    graph = helper.make_graph(
        nodes,
        "text_detection",
        [helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["height", "width"])],
        [helper.make_tensor_value_info("TEXT_MAP", TensorProto.FLOAT, ["height", "width"])],
        initializer=[
            _constant("axes", np.array([0, 1], dtype=np.int64)),
            _constant("kernel", np.ones((1, 1, 3, 3), dtype=np.float32)),
            _constant("half", np.array(0.5, dtype=np.float32)),
            _constant("sharpness", np.array(10.0, dtype=np.float32)),
        ],
    )
    return _model(graph)


def templates() -> np.ndarray:
    """[35, classes]: each glyph left-aligned in its 7x5 grid, flattened and scaled to unit length."""
    columns = []
    for character in font.ALPHABET:
        glyph = font.glyph(character)
        inked = np.flatnonzero(glyph.any(axis=0))
        aligned = np.zeros_like(glyph)
        aligned[:, : glyph.shape[1] - inked[0]] = glyph[:, inked[0] :]
        flat = aligned.reshape(-1)
        columns.append(flat / np.linalg.norm(flat))
    return np.stack(columns, axis=1).astype(np.float32)


def text_recognition() -> onnx.ModelProto:
    classes = len(font.ALPHABET)
    nodes = [
        helper.make_node("ReduceL2", ["GLYPHS"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Add", ["norm", "epsilon"], ["safe_norm"]),
        helper.make_node("Div", ["GLYPHS", "safe_norm"], ["unit"]),
        helper.make_node("MatMul", ["unit", "templates"], ["similarity"]),
        helper.make_node("Mul", ["similarity", "temperature"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["PROBS"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "text_recognition",
        [helper.make_tensor_value_info("GLYPHS", TensorProto.FLOAT, ["glyphs", 35])],
        [helper.make_tensor_value_info("PROBS", TensorProto.FLOAT, ["glyphs", classes])],
        initializer=[
            _constant("epsilon", np.array(1e-6, dtype=np.float32)),
            _constant("templates", templates()),
            _constant("temperature", np.array(50.0, dtype=np.float32)),
        ],
    )
    return _model(graph)


def build_models(output: Path) -> None:
    for name, model in (("text_detection", text_detection()), ("text_recognition", text_recognition())):
        (output / name / "1").mkdir(parents=True, exist_ok=True)
        onnx.save(model, output / name / "1" / "model.onnx")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="the model repository to write into"
    )
    build_models(parser.parse_args().output)


if __name__ == "__main__":
    main()
