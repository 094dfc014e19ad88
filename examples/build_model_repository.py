"""Build the example Triton model repository (ONNX models made with onnx.helper)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17; accepted by onnxruntime >= 1.14
PRODUCER = "nereid-examples"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "model_repository"
LABELS = ("cat", "dog", "bird", "fish")


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=PRODUCER,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _add_sub(name: str, elem_type: int, compute_type: int | None = None) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, shapes [batch, 16].

    With compute_type, the inputs are cast to it first and the results cast back.
    """
    shape: list[str | int] = ["batch", 16]
    inputs = [helper.make_tensor_value_info(n, elem_type, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, elem_type, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes: list[onnx.NodeProto] = []
    a, b, total, diff = "INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1"
    if compute_type is not None:
        nodes += [
            helper.make_node("Cast", ["INPUT0"], ["a"], to=compute_type),
            helper.make_node("Cast", ["INPUT1"], ["b"], to=compute_type),
        ]
        a, b, total, diff = "a", "b", "sum", "diff"
    nodes += [helper.make_node("Add", [a, b], [total]), helper.make_node("Sub", [a, b], [diff])]
    if compute_type is not None:
        nodes += [
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=elem_type),
            helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=elem_type),
        ]
    return _model(helper.make_graph(nodes, name, inputs, outputs))


def _classifier() -> onnx.ModelProto:
    shape: list[str | int] = ["batch", len(LABELS)]
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["INPUT0"], ["OUTPUT0"], axis=-1)],
        "simple_classifier",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
    )
    return _model(graph)


def _tensor(name: str, data_type: str, dims: int, extra: str = "") -> str:
    lines = [f'    name: "{name}"', f"    data_type: {data_type}", f"    dims: [ {dims} ]"]
    if extra:
        lines.append(f"    {extra}")
    return "  {\n" + "\n".join(lines) + "\n  }"


def _config(name: str, inputs: list[str], outputs: list[str]) -> str:
    return (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        "max_batch_size: 8\n"
        "input [\n" + ",\n".join(inputs) + "\n]\n"
        "output [\n" + ",\n".join(outputs) + "\n]\n"
    )


def _add_sub_config(name: str, data_type: str) -> str:
    return _config(
        name,
        [_tensor(n, data_type, 16) for n in ("INPUT0", "INPUT1")],
        [_tensor(n, data_type, 16) for n in ("OUTPUT0", "OUTPUT1")],
    )


MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "simple": (
        lambda: _add_sub("simple", TensorProto.INT32),
        _add_sub_config("simple", "TYPE_INT32"),
    ),
    # int8 Add/Sub wrap around like C int8 arithmetic in onnxruntime.
    "simple_int8": (
        lambda: _add_sub("simple_int8", TensorProto.INT8),
        _add_sub_config("simple_int8", "TYPE_INT8"),
    ),
    # Strings hold decimal integers: Cast string->int32, Add/Sub, Cast int32->string.
    "simple_string": (
        lambda: _add_sub("simple_string", TensorProto.STRING, TensorProto.INT32),
        _add_sub_config("simple_string", "TYPE_STRING"),
    ),
    "simple_classifier": (
        _classifier,
        _config(
            "simple_classifier",
            [_tensor("INPUT0", "TYPE_FP32", len(LABELS))],
            [_tensor("OUTPUT0", "TYPE_FP32", len(LABELS), 'label_filename: "labels.txt"')],
        ),
    ),
}


def build_model_repository(output: Path = DEFAULT_OUTPUT) -> list[Path]:
    """Write every model's config.pbtxt, 1/model.onnx and labels; return the written paths."""
    written: list[Path] = []
    for name, (make_model, config) in MODELS.items():
        files: dict[str, bytes] = {
            "config.pbtxt": config.encode(),
            "1/model.onnx": make_model().SerializeToString(deterministic=True),
        }
        if name == "simple_classifier":
            files["labels.txt"] = "".join(f"{label}\n" for label in LABELS).encode()
        for rel, data in files.items():
            path = output / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="repository folder")
    args = parser.parse_args(argv)
    for path in build_model_repository(args.output):
        print(path)


if __name__ == "__main__":
    main()
