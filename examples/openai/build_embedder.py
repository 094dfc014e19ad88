"""Build tiny_embed/1/model.onnx: a text embedding model for ONNX Runtime, with no download.

The graph lower-cases the text, splits it at spaces, looks each word up in a small vocabulary (an unknown
word is a row of zeros), sums the words' vectors and scales the sum to unit length: texts that share
words point the same way. The vocabulary and its vectors come from a fixed seed, so every build is the
same model.

    python examples/openai/build_embedder.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DIMENSIONS = 64
VOCABULARY = (
    "the a an and or but of to in on at for with from by about as into like through after over between out "
    "against during without before under around among i you he she it we they me him her us them my your "
    "his its our their this that these those is are was were be been being have has had do does did will "
    "would can could should may might must hello world cat dog bird fish tree sun moon star water fire "
    "earth air city road car train ship plane house home room door window table chair book page word text "
    "model server request answer question fast slow big small good bad new old red green blue black white"
).split()
HERE = Path(__file__).resolve().parent


def build() -> onnx.ModelProto:
    vectors = np.random.default_rng(48).standard_normal((len(VOCABULARY) + 1, DIMENSIONS)).astype(np.float32)
    vectors[0] = 0.0  # row 0: padding and unknown words
    nodes = [
        helper.make_node("Reshape", ["text_input", "one_by_one"], ["text_2d"]),
        helper.make_node("StringNormalizer", ["text_2d"], ["lower"], case_change_action="LOWER", locale="C"),
        helper.make_node("StringSplit", ["lower"], ["words", "counts"], delimiter=" "),
        helper.make_node(
            "LabelEncoder",
            ["words"],
            ["ids"],
            domain="ai.onnx.ml",
            keys_strings=list(VOCABULARY),
            values_int64s=list(range(1, len(VOCABULARY) + 1)),
            default_int64=0,
        ),
        helper.make_node("Gather", ["vectors", "ids"], ["word_vectors"]),
        helper.make_node("ReduceSum", ["word_vectors", "word_axes"], ["sum"], keepdims=0),
        helper.make_node("Mul", ["sum", "sum"], ["squares"]),
        helper.make_node("ReduceSum", ["squares", "last_axis"], ["norm_squared"], keepdims=0),
        helper.make_node("Add", ["norm_squared", "epsilon"], ["norm_squared_safe"]),
        helper.make_node("Sqrt", ["norm_squared_safe"], ["norm"]),
        helper.make_node("Div", ["sum", "norm"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_embed",
        [helper.make_tensor_value_info("text_input", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [DIMENSIONS])],
        initializer=[
            numpy_helper.from_array(vectors, "vectors"),
            numpy_helper.from_array(np.array([1, 1], dtype=np.int64), "one_by_one"),
            numpy_helper.from_array(np.array([0, 1, 2], dtype=np.int64), "word_axes"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
            numpy_helper.from_array(np.array(1e-12, dtype=np.float32), "epsilon"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)]
    )
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=HERE / "model_repository" / "tiny_embed" / "1" / "model.onnx"
    )
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
