"""Model warmup (`model_warmup` in the config): samples run on every instance before the version serves.

As in Triton, a sample of `batch_size` N is N requests of one batch row each, executed together `count`
times on each instance, straight through the instance pool (no queue). Triton 2.51 counts those executions
in the model's statistics (requests, executions, batch sizes) as any other, so they are counted here too
when the pool's model keeps statistics. Inputs are zeros,
random values, or the raw bytes of a file in the model's `warmup/` folder. A sample that fails fails the
load, with Triton's text. Samples of batch size 0 are skipped, as Triton skips them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, BackendResult
from nereid.backends.responses import ResponseStream
from nereid.datatypes import config_to_wire, deserialize_bytes, element_size, numpy_dtype
from nereid.errors import InvalidArgument, NereidError
from nereid.scheduling.instances import InstancePool
from nereid.statistics import ModelStatistics, RequestTiming

log = logging.getLogger(__name__)

WARMUP_FOLDER = "warmup"  # beside config.pbtxt: the files `input_data_file` names


@dataclass(frozen=True)
class WarmupSample:
    name: str
    count: int  # executions per instance
    inputs: dict[str, np.ndarray]  # one batch row of each input; every request of the sample gets these
    batch_size: int


def warmup_samples(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The samples of `model_warmup`, their data made now; settings Triton refuses raise InvalidArgument."""
    samples = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            log.debug("model '%s': skipping batch 0 warmup sample '%s'", config.name, setting.name)
            continue
        inputs = {
            name: _sample_input(name, spec, config, model_dir / WARMUP_FOLDER)
            for name, spec in sorted(setting.inputs.items())
        }
        samples.append(WarmupSample(setting.name, max(1, setting.count), inputs, setting.batch_size))
    return samples


def _sample_input(name: str, spec: mc.ModelWarmup.Input, config: mc.ModelConfig, folder: Path) -> np.ndarray:
    dims = tuple(spec.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgument(
            f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )
    # Every input, control inputs included, has a batch row when the model batches.
    shape = ((1,) if config.max_batch_size > 0 else ()) + dims
    count = math.prod(shape)
    datatype = config_to_wire(mc.DataType.Name(spec.data_type))
    kind = spec.WhichOneof("input_data_type")
    if kind is None:
        raise InvalidArgument(f"warmup setting expects input '{name}' to have input_data_type set")
    if datatype == "BYTES":
        if kind == "input_data_file":
            data = _read(folder / spec.input_data_file)
            return deserialize_bytes(data, count, name, config.name).reshape(shape)
        # Triton gives strings zero bytes, random or not: each element is then an empty string.
        return np.full(shape, b"", dtype=np.object_)
    dtype = numpy_dtype(datatype)
    if kind == "zero_data":
        return np.zeros(shape, dtype)
    if kind == "random_data":
        return _random(shape, dtype)
    data = _read(folder / spec.input_data_file)
    needed = count * element_size(datatype)
    if len(data) < needed:
        raise InvalidArgument(
            f"warmup setting expects {needed} bytes, but the data provided from {spec.input_data_file} only "
            f"has {len(data)} bytes"
        )
    return np.frombuffer(data[:needed], dtype=dtype).reshape(shape)


def _random(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng()
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.random(shape).astype(dtype)  # floats in [0, 1): finite, unlike random bytes


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"unable to read warmup data file '{path}': {exc.strerror}") from None


def warm_up(
    pool: InstancePool,
    samples: list[WarmupSample],
    config: mc.ModelConfig,
    statistics: ModelStatistics | None = None,
) -> None:
    """Run every sample on every instance (blocking: call from a loading thread, not the event loop);
    successful executions go into `statistics`, as Triton counts them."""
    if not samples:
        return
    coroutine = _warm_up(pool, samples, config, statistics)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as runner:  # a thread with a loop of its own
        runner.submit(asyncio.run, coroutine).result()


async def _warm_up(
    pool: InstancePool,
    samples: list[WarmupSample],
    config: mc.ModelConfig,
    statistics: ModelStatistics | None,
) -> None:
    outputs = tuple(o.name for o in config.output)
    decoupled = config.model_transaction_policy.decoupled
    for index in range(len(pool)):
        for sample in samples:
            for iteration in range(1, sample.count + 1):
                log.debug(
                    "model '%s' instance %d is running warmup sample '%s' for iteration %d",
                    config.name,
                    index,
                    sample.name,
                    iteration,
                )
                errors = await _run_sample(pool, index, sample, outputs, decoupled, statistics)
                if errors:
                    raise InvalidArgument(
                        f"failed to run warmup sample '{sample.name}': " + "".join(f"{e}; " for e in errors)
                    )


async def _run_sample(
    pool: InstancePool,
    index: int,
    sample: WarmupSample,
    outputs: tuple[str, ...],
    decoupled: bool,
    statistics: ModelStatistics | None,
) -> list[str]:
    """The errors the sample's requests met; decoupled models' responses are read to their end."""
    requests = [
        BackendRequest(sample.inputs, outputs, stream=ResponseStream() if decoupled else None)
        for _ in range(sample.batch_size)
    ]
    done: asyncio.Future[tuple[list[BackendResult], int, int]] = asyncio.get_running_loop().create_future()
    submitted = time.perf_counter_ns()
    pool.submit(index, requests, lambda *ended: done.set_result(ended), limited=False)
    results, started, ended = await done
    errors = [str(r) for r in results if isinstance(r, NereidError)]
    if statistics is not None and not errors:
        timing = RequestTiming(queue_ns=max(0, started - submitted), infer_ns=ended - started, batched=True)
        statistics.record_execution(sample.batch_size, 0, timing.infer_ns, 0)
        for _ in requests:
            statistics.record_batched_request(time.perf_counter_ns() - submitted, timing, 0, 0)
    for request, result in zip(requests, results, strict=True):
        if request.stream is None or isinstance(result, NereidError):
            continue
        final = False
        while not final:
            response, final = await request.stream.get()
            if isinstance(response, NereidError):
                errors.append(str(response))
    return errors
