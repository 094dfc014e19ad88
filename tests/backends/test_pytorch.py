"""PyTorch models built here (TorchScript and torch.export), served, and compared with torch itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from nereid.core.engine import Engine
from nereid.types import SEQUENCE_START, InferRequest, InferTensor
from tests.backends.serving import (
    execute_together,
    failure,
    infer,
    infer_concurrently,
    model_dir,
    outputs_of,
    serving,
)

torch = pytest.importorskip("torch")


class Affine(torch.nn.Module):
    """Two inputs; three outputs of different types, one of them the size of the batch it ran in."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4, 3, generator=generator))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = x @ self.weight + y
        batch = torch.full((x.shape[0], 1), x.shape[0], dtype=torch.int64)
        return z, z.argmax(dim=1, keepdim=True), batch


INDEXED_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] },
  { name: "INPUT__1" data_type: TYPE_FP32 dims: [3] }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [3] },
  { name: "OUTPUT__1" data_type: TYPE_INT64 dims: [1] },
  { name: "OUTPUT__2" data_type: TYPE_INT64 dims: [1] }
]
dynamic_batching {}
"""

# Inputs named after forward's arguments (listed out of order), outputs mapped in config order.
NAMED_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [
  { name: "y" data_type: TYPE_FP32 dims: [3] },
  { name: "x" data_type: TYPE_FP32 dims: [4] }
]
output [
  { name: "SCORES" data_type: TYPE_FP32 dims: [3] },
  { name: "BEST" data_type: TYPE_INT64 dims: [1] },
  { name: "BATCH" data_type: TYPE_INT64 dims: [1] }
]
dynamic_batching { max_queue_delay_microseconds: 500000 }
"""


def _inputs(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 4), np.float32), rng.standard_normal((rows, 3), np.float32)


def _direct(module: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    with torch.inference_mode():
        return [t.numpy() for t in module(torch.from_numpy(x), torch.from_numpy(y))]


@pytest.fixture
def scripted(tmp_path: Path) -> torch.jit.ScriptModule:
    return torch.jit.script(Affine().eval())


def test_torchscript_with_indexed_names(tmp_path: Path, scripted: torch.jit.ScriptModule) -> None:
    scripted.save(str(model_dir(tmp_path, "affine", INDEXED_CONFIG) / "model.pt"))
    x, y = _inputs(3, 1)
    with serving(tmp_path) as engine:
        outputs = infer(engine, "affine", {"INPUT__0": x, "INPUT__1": y})
        expected = _direct(scripted, x, y)
        np.testing.assert_allclose(outputs["OUTPUT__0"], expected[0], rtol=1e-6)
        np.testing.assert_array_equal(outputs["OUTPUT__1"], expected[1])
        np.testing.assert_array_equal(outputs["OUTPUT__2"], [[3]] * 3)
        assert engine.model_config("affine")["dynamic_batching"]["preferred_batch_size"] == [8]


def test_torchscript_with_argument_names_and_batched_requests(
    tmp_path: Path, scripted: torch.jit.ScriptModule
) -> None:
    scripted.save(str(model_dir(tmp_path, "named", NAMED_CONFIG) / "model.pt"))
    batches = [dict(zip(("x", "y"), _inputs(rows, seed), strict=True)) for seed, rows in enumerate((1, 2, 3))]
    with serving(tmp_path) as engine:
        for inputs, result in zip(batches, execute_together(engine, "named", batches), strict=True):
            outputs = outputs_of(result)
            expected = _direct(scripted, inputs["x"], inputs["y"])
            np.testing.assert_allclose(outputs["SCORES"], expected[0], rtol=1e-6)
            np.testing.assert_array_equal(outputs["BEST"], expected[1])
            # The three requests ran as one batch of six rows.
            np.testing.assert_array_equal(outputs["BATCH"], [[6]] * len(inputs["x"]))
        # Through the dynamic batcher: six rows wait less than the queue delay for a batch of eight.
        for inputs, outputs in zip(batches, infer_concurrently(engine, "named", batches), strict=True):
            expected = _direct(scripted, inputs["x"], inputs["y"])
            np.testing.assert_allclose(outputs["SCORES"], expected[0], rtol=1e-6)
            np.testing.assert_array_equal(outputs["BATCH"], [[6]] * len(inputs["x"]))


def test_exported_program_is_auto_completed(tmp_path: Path) -> None:
    module = Affine().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    example = (torch.zeros(2, 4), torch.zeros(2, 3))
    program = torch.export.export(module, example, dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    folder = model_dir(
        tmp_path, "exported", 'platform: "pytorch_libtorch"\ndefault_model_filename: "model.pt2"'
    )
    torch.export.save(program, str(folder / "model.pt2"))
    x, y = _inputs(2, 7)
    with serving(tmp_path) as engine:
        config = engine.model_config("exported")
        assert config["max_batch_size"] == 4 and "dynamic_batching" in config
        assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
            ("x", "TYPE_FP32", [4]),
            ("y", "TYPE_FP32", [3]),
        ]
        assert [(o["name"], o["data_type"]) for o in config["output"]] == [
            ("OUTPUT__0", "TYPE_FP32"),
            ("OUTPUT__1", "TYPE_INT64"),
            ("OUTPUT__2", "TYPE_INT64"),
        ]
        outputs = infer(engine, "exported", {"x": x, "y": y})
        expected = _direct(module, x, y)
        np.testing.assert_allclose(outputs["OUTPUT__0"], expected[0], rtol=1e-6)
        np.testing.assert_array_equal(outputs["OUTPUT__1"], expected[1])
        results = execute_together(engine, "exported", [{"x": x, "y": y}, {"x": x[:1], "y": y[:1]}])
        np.testing.assert_array_equal(outputs_of(results[1])["OUTPUT__2"], [[3]])


def test_parameters_and_bad_configs(tmp_path: Path, scripted: torch.jit.ScriptModule) -> None:
    threads = torch.get_num_threads()
    tuned = INDEXED_CONFIG + (
        'parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }\n'
        'parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }\n'
        'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }\n'
    )
    scripted.save(str(model_dir(tmp_path, "tuned", tuned) / "model.pt"))
    bad = INDEXED_CONFIG + 'parameters { key: "INFERENCE_MODE" value: { string_value: "sometimes" } }\n'
    scripted.save(str(model_dir(tmp_path, "bad_parameter", bad) / "model.pt"))
    gpu = INDEXED_CONFIG + "instance_group [{ kind: KIND_GPU }]\n"
    scripted.save(str(model_dir(tmp_path, "gpu", gpu) / "model.pt"))
    missing_io = 'platform: "pytorch_libtorch"\nmax_batch_size: 2'
    scripted.save(str(model_dir(tmp_path, "no_io", missing_io) / "model.pt"))
    x, y = _inputs(2, 3)
    try:
        with serving(tmp_path) as engine:
            outputs = infer(engine, "tuned", {"INPUT__0": x, "INPUT__1": y})
            np.testing.assert_allclose(outputs["OUTPUT__0"], _direct(scripted, x, y)[0], rtol=1e-6)
            # Set on the thread that runs the model: here, execute() runs on this one.
            outputs_of(execute_together(engine, "tuned", [{"INPUT__0": x, "INPUT__1": y}])[0])
            assert torch.get_num_threads() == 1
            assert "'INFERENCE_MODE' must be true or false, got 'sometimes'" in failure(
                engine, "bad_parameter"
            )
            if not torch.cuda.is_available():
                assert "asks for KIND_GPU, but PyTorch has no CUDA device" in failure(engine, "gpu")
            assert "no inputs or outputs" in failure(engine, "no_io")
    finally:
        torch.set_num_threads(threads)


def test_a_model_that_fails_fails_its_request_only(tmp_path: Path) -> None:
    class Picky(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bool((x < 0).any()):
                raise ValueError("negative input")
            return x * 2

    config = """
platform: "pytorch_libtorch"
max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [2] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }]
"""
    torch.jit.script(Picky()).save(str(model_dir(tmp_path, "picky", config) / "model.pt"))
    with serving(tmp_path) as engine:
        with pytest.raises(Exception, match="(?s)PyTorch error while running model 'picky'.*negative input"):
            infer(engine, "picky", {"INPUT__0": np.array([[-1.0, 2.0]], np.float32)})
        outputs = infer(engine, "picky", {"INPUT__0": np.array([[1.0, 2.0]], np.float32)})
        np.testing.assert_array_equal(outputs["OUTPUT__0"], [[2.0, 4.0]])


class StartAware(torch.nn.Module):
    """Adds 100 to the value on the first request of a sequence (the sequence batcher's START input)."""

    def forward(self, VALUE: torch.Tensor, START: torch.Tensor) -> torch.Tensor:  # noqa: N803
        return VALUE + START.to(VALUE.dtype) * 100


SEQUENCE_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 4
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
input [ { name: "VALUE" data_type: TYPE_FP32 dims: [1] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1] } ]
"""


def test_sequence_control_inputs_reach_a_torchscript_model(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, "start_aware", SEQUENCE_CONFIG)
    torch.jit.script(StartAware()).save(str(folder / "model.pt"))

    async def sequence(engine: Engine) -> list[float]:
        answers = []
        for start in (True, False):
            value = np.array([[2.0]], np.float32)
            request = InferRequest(
                "start_aware",
                "",
                [InferTensor("VALUE", "FP32", value.shape, value)],
                sequence_id=7,
                flags=SEQUENCE_START if start else 0,
            )
            response = await engine.infer(request)
            answers.append(float(response.outputs[0].data[0, 0]))
        return answers

    with serving(tmp_path) as engine:
        assert asyncio.run(sequence(engine)) == [102.0, 2.0]


class Words(torch.nn.Module):
    """Strings in and out as List[str], with a tensor beside them."""

    def forward(self, words: list[str], counts: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        return [w + "!" for w in words], counts * 2


# one 3-element string tensor and one INT32 tensor, in and out
WORDS_CONFIG = 'backend: "pytorch"\nmax_batch_size: 0\n' + "".join(
    f'{kind} {{ name: "{name}" data_type: {data_type} dims: [ 3 ] }}\n'
    for kind, name, data_type in (
        ("input", "words", "TYPE_STRING"),
        ("input", "counts", "TYPE_INT32"),
        ("output", "OUTPUT__0", "TYPE_STRING"),
        ("output", "OUTPUT__1", "TYPE_INT32"),
    )
)


def test_string_tensors_are_lists_of_str_for_torchscript(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(Words()), str(model_dir(tmp_path, "words", WORDS_CONFIG) / "model.pt"))
    words = np.array([b"a", b"bc", "d\u00e9".encode()], dtype=np.object_)
    with serving(tmp_path) as engine:
        outputs = infer(engine, "words", {"words": words, "counts": np.arange(3, dtype=np.int32)})
    assert list(outputs["OUTPUT__0"]) == [b"a!", b"bc!", "d\u00e9!".encode()]
    np.testing.assert_array_equal(outputs["OUTPUT__1"], [0, 2, 4])


class Echo(torch.nn.Module):
    """A single List[str] output (not a tuple)."""

    def forward(self, words: list[str]) -> list[str]:
        return words


def test_a_single_list_of_strings_is_one_output(tmp_path: Path) -> None:
    config = WORDS_CONFIG.replace('input { name: "counts" data_type: TYPE_INT32 dims: [ 3 ] }\n', "").replace(
        'output { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 3 ] }\n', ""
    )
    torch.jit.save(torch.jit.script(Echo()), str(model_dir(tmp_path, "echo", config) / "model.pt"))
    words = np.array([b"x", b"y", b"z"], dtype=np.object_)
    with serving(tmp_path) as engine:
        assert list(infer(engine, "echo", {"words": words})["OUTPUT__0"]) == [b"x", b"y", b"z"]
