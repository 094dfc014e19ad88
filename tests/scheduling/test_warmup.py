"""Model warmup: samples from the config, run on every instance through the pool, failures with Triton's text."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, BackendResult
from nereid.errors import InvalidArgument
from nereid.scheduling.instances import InstancePool
from nereid.scheduling.warmup import warm_up, warmup_samples
from nereid.statistics import ModelStatistics


def _config(text: str, max_batch_size: int = 8) -> mc.ModelConfig:
    config = text_format.Parse(text, mc.ModelConfig())
    config.name = "m"
    config.max_batch_size = max_batch_size
    config.output.add(name="OUT", data_type=mc.TYPE_FP32, dims=[4])
    return config


SAMPLES = """
model_warmup [
  { name: "zeros" batch_size: 2 count: 3
    inputs { key: "A" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } },
  { name: "random" batch_size: 1
    inputs { key: "A" value { data_type: TYPE_INT8 dims: [2, 2] random_data: true } }
    inputs { key: "S" value { data_type: TYPE_STRING dims: [3] random_data: true } } },
  { name: "skipped" batch_size: 0
    inputs { key: "A" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }
]
"""


def test_samples_have_one_batch_row_and_skip_batch_size_zero(tmp_path: Path) -> None:
    zeros, random = warmup_samples(_config(SAMPLES), tmp_path)
    assert (zeros.name, zeros.count, zeros.batch_size) == ("zeros", 3, 2)
    assert zeros.inputs["A"].shape == (1, 4) and not zeros.inputs["A"].any()
    assert (random.count, random.inputs["A"].dtype, random.inputs["A"].shape) == (1, np.int8, (1, 2, 2))
    assert random.inputs["S"].tolist() == [[b"", b"", b""]]  # strings get zero bytes, as in Triton
    (unbatched,) = warmup_samples(_config(SAMPLES.split(",")[0] + "]", max_batch_size=0), tmp_path)
    assert unbatched.inputs["A"].shape == (4,)


def test_input_data_files_are_read_from_the_warmup_folder(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "floats").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    (tmp_path / "warmup" / "strings").write_bytes(struct.pack("<I", 3) + b"233")
    config = _config(
        """model_warmup { name: "file" batch_size: 1
             inputs { key: "A" value { data_type: TYPE_FP32 dims: [4] input_data_file: "floats" } }
             inputs { key: "S" value { data_type: TYPE_STRING dims: [1] input_data_file: "strings" } } }"""
    )
    (sample,) = warmup_samples(config, tmp_path)
    assert sample.inputs["A"].tolist() == [[0, 1, 2, 3]]  # the first bytes the shape needs
    assert sample.inputs["S"].tolist() == [[b"233"]]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            'inputs { key: "A" value { data_type: TYPE_FP32 dims: [-1] zero_data: true } }',
            "warmup setting expects all variable-size dimensions are specified for input 'A'",
        ),
        (
            'inputs { key: "A" value { data_type: TYPE_FP32 dims: [4] } }',
            "warmup setting expects input 'A' to have input_data_type set",
        ),
        (
            'inputs { key: "A" value { data_type: TYPE_FP32 dims: [64] input_data_file: "small" } }',
            "warmup setting expects 256 bytes, but the data provided from small only has 8 bytes",
        ),
        (
            'inputs { key: "A" value { data_type: TYPE_FP32 dims: [4] input_data_file: "missing" } }',
            "unable to read warmup data file",
        ),
    ],
)
def test_settings_triton_refuses_fail_with_its_text(tmp_path: Path, setting: str, message: str) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "small").write_bytes(b"\0" * 8)
    config = _config(f'model_warmup {{ name: "bad" batch_size: 1 {setting} }}')
    with pytest.raises(InvalidArgument, match=message):
        warmup_samples(config, tmp_path)


class RecordingInstance:
    """Records the executions it runs (batch size, thread); fails when told to."""

    def __init__(self, fail: str = "") -> None:
        self.executions: list[int] = []
        self.fail = fail
        self.closed = False

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.executions.append(len(requests))
        if self.fail:
            raise InvalidArgument(self.fail)
        return [{"OUT": np.zeros((1, 4), np.float32)} for _ in requests]

    def close(self) -> None:
        self.closed = True


def test_every_instance_runs_each_sample_count_times_as_one_batch(tmp_path: Path) -> None:
    config = _config(SAMPLES)
    instances = [RecordingInstance(), RecordingInstance()]
    pool = InstancePool("m", instances)
    statistics = ModelStatistics()
    try:
        warm_up(pool, warmup_samples(config, tmp_path), config, statistics)
    finally:
        pool.stop(lambda: None)
    assert [i.executions for i in instances] == [[2, 2, 2, 1]] * 2
    assert pool.outstanding(0) == pool.outstanding(1) == 0
    # counted as Triton 2.51 counts warmup: every request and execution, by batch size
    assert (statistics.execution_count, statistics.inference_count, statistics.success.count) == (8, 14, 14)
    assert statistics.queue.count == statistics.compute_infer.count == 14
    assert statistics.batch_executions() == {1: 2, 2: 6}


def test_a_failing_sample_fails_with_tritons_text_and_stops_warmup(tmp_path: Path) -> None:
    config = _config(SAMPLES)
    instance = RecordingInstance(fail="An Error Occurred")
    pool = InstancePool("m", [instance])
    try:
        with pytest.raises(InvalidArgument) as caught:
            warm_up(pool, warmup_samples(config, tmp_path), config)
    finally:
        pool.stop(lambda: None)
    assert str(caught.value) == "failed to run warmup sample 'zeros': An Error Occurred; An Error Occurred; "
    assert instance.executions == [2]


def test_warmup_runs_from_a_thread_whose_event_loop_is_running(tmp_path: Path) -> None:
    """Loading may happen on a thread that runs a loop already: warmup then gets a loop of its own."""
    config = _config(SAMPLES)
    instance = RecordingInstance()
    pool = InstancePool("m", [instance])

    async def load() -> None:
        warm_up(pool, warmup_samples(config, tmp_path), config)

    try:
        asyncio.run(load())
    finally:
        pool.stop(lambda: None)
    assert instance.executions == [2, 2, 2, 1]
