"""Triton's `sequence` and `dyna_sequence` test backends: an INT32 accumulator per sequence.

`sequence`: with READY set, START sets the accumulator to the sum of INPUT's elements and any other
request adds that sum; OUTPUT is INPUT's shape filled with the accumulator.
`dyna_sequence`: the same, keyed by the CORRID control input (UINT64, or STRING holding a number); the
END request also adds the correlation id itself before answering.

Triton keeps one accumulator per batch slot; Nereid keys it by correlation id, which is the same thing
seen from the sequence (a slot holds one sequence from START to END). `execute_delay_ms` delays each
execution.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import SEQUENCE_END, BackendRequest, BackendResult, InstanceSpec, Outputs
from nereid.backends.builtin import BuiltinBackend, config_error, delay_ms, scalar, sleep_ms
from nereid.backends.framework import per_request
from nereid.errors import InvalidArgument, Unsupported


def _wrap_int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


class SequenceBackend(BuiltinBackend):
    name = "sequence"
    controls: tuple[str, ...] = ("START", "READY")

    def check(self, config: mc.ModelConfig, model_file: object) -> None:
        names = {control_input.name for control_input in config.sequence_batching.control_input}
        missing = [c for c in self.controls if c not in names]
        if missing:
            raise config_error(
                config,
                f"{', '.join(repr(c) for c in self.controls)} must be configured as the control inputs",
            )
        if [t.name for t in config.input] != ["INPUT"] or [t.name for t in config.output] != ["OUTPUT"]:
            raise config_error(config, "expected one input named 'INPUT' and one output named 'OUTPUT'")
        if config.input[0].data_type != mc.TYPE_INT32 or config.output[0].data_type != mc.TYPE_INT32:
            raise config_error(config, "'INPUT' and 'OUTPUT' must have data type TYPE_INT32")

    def create_instance(self, spec: InstanceSpec) -> SequenceInstance:
        self.refuse_gpu(spec)
        return SequenceInstance(spec, self._key)

    @staticmethod
    def _key(request: BackendRequest) -> int | str:
        return request.correlation_id


class DynaSequenceBackend(SequenceBackend):
    name = "dyna_sequence"
    controls = ("START", "END", "READY", "CORRID")

    @staticmethod
    def _key(request: BackendRequest) -> int | str:
        array = request.inputs.get("CORRID")
        if array is None or array.size == 0:
            raise Unsupported("failed to get input 'CORRID'")
        value = np.asarray(array).reshape(-1)[0]
        if isinstance(value, (bytes, str)):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            try:
                return int(text)
            except ValueError:
                raise InvalidArgument(f"failed to convert correlation id '{text}' to an integer") from None
        return int(value)


class SequenceInstance:
    def __init__(self, spec: InstanceSpec, key: object) -> None:
        self._dyna = spec.config.backend == "dyna_sequence"
        self._key = key
        self._batching = spec.config.max_batch_size > 0
        self._slots = max(1, spec.config.max_batch_size)
        self._delay_ms = delay_ms(spec.config)
        self._accumulators: dict[int | str, int] = {}
        self._lock = threading.Lock()  # instances run one execution at a time; this guards close()

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if len(requests) > self._slots:
            error = Unsupported("unable to execute batch larger than max-batch-size")
            return [error for _ in requests]
        sleep_ms(self._delay_ms)
        with self._lock:
            return per_request(requests, self._run)

    def _run(self, request: BackendRequest) -> Outputs:
        values = request.inputs.get("INPUT")
        if values is None:
            raise Unsupported("failed to get input 'INPUT'")
        if self._batching and values.ndim and values.shape[0] != 1:
            raise Unsupported("unable to execute more than one timestep at a time")
        key = self._key(request)  # type: ignore[operator]
        total = int(np.asarray(values, dtype=np.int64).sum())
        if scalar(request, "READY") != 0:
            if scalar(request, "START") != 0:
                self._accumulators[key] = _wrap_int32(total)
            else:
                self._accumulators[key] = _wrap_int32(self._accumulators.get(key, 0) + total)
            if self._dyna and scalar(request, "END") != 0:
                self._accumulators[key] = _wrap_int32(self._accumulators[key] + int(key))
        value = self._accumulators.get(key, 0)
        if request.flags & SEQUENCE_END:
            self._accumulators.pop(key, None)
        if not request.outputs:
            return {}
        return {"OUTPUT": np.full(values.shape, value, dtype=np.int32)}

    def close(self) -> None:
        with self._lock:
            self._accumulators.clear()


def create_backend() -> SequenceBackend:
    return SequenceBackend()


def create_dyna_backend() -> DynaSequenceBackend:
    return DynaSequenceBackend()
