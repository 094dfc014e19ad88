"""Triton's `identity` backend: each requested OUTPUT<k> is a copy of INPUT<k>.

Parameters (config `parameters`), as Triton's identity backend reads them:

- `execute_delay_ms`: sleep this long in each execution.
- `instance_wise_delay_multiplier`: with it, instance k sleeps `execute_delay_ms * multiplier * k`
  (at least `execute_delay_ms`), so instances of one model run at different speeds.
- `creation_delay_sec`: loading each version takes this long.

An optional INPUT<k> left out of a request gives an OUTPUT<k> of zeros with the input's configured shape
(variable dimensions as 1), batched like the request.

Like Triton's, it also shows off what backends can do beyond tensors: each response carries four example
parameters (`RESPONSE_PARAMETERS`), the custom counter `input_byte_size_counter` adds up the byte sizes of
the inputs each model version received, and at verbose level 1 each input is logged with its byte size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs, OutputsWithParameters
from nereid.backends.builtin import BuiltinBackend, config_error, sleep_ms, tensor_dims
from nereid.backends.framework import int_parameter, numpy_type, per_request
from nereid.custom_metrics import COUNTER, CustomMetrics
from nereid.datatypes import serialize_bytes
from nereid.errors import Unsupported

log = logging.getLogger(__name__)

# One of each parameter type, the values clients of Triton's identity backend check for.
RESPONSE_PARAMETERS = {
    "param0": "an example string parameter",
    "param1": 42,
    "param2": False,
    "param3": 123.123,
}
BYTE_SIZE_METRIC = "input_byte_size_counter"


class IdentityBackend(BuiltinBackend):
    name = "identity"
    requires_io = False  # as in Triton, a configuration without tensors loads: it pairs nothing

    def check(self, config: mc.ModelConfig, model_file: object) -> None:
        """The pairing rules of Triton's identity backend, with its texts."""
        if len(config.input) != len(config.output):
            raise config_error(config, "model configuration must have equal input/output pairs")
        inputs: dict[str, tuple[int, list[int]]] = {}
        outputs: dict[str, tuple[int, list[int]]] = {}
        for tensor in config.input:
            if not tensor.name.startswith("INPUT"):
                raise config_error(
                    config, f"expected input name to follow INPUT<index> pattern, got '{tensor.name}'"
                )
            inputs[tensor.name[5:]] = (tensor.data_type, tensor_dims(tensor))
        for tensor in config.output:
            if not tensor.name.startswith("OUTPUT"):
                raise config_error(
                    config, f"expected output name to follow OUTPUT<index> pattern, got '{tensor.name}'"
                )
            outputs[tensor.name[6:]] = (tensor.data_type, tensor_dims(tensor))
        for index, (data_type, dims) in outputs.items():
            if index not in inputs:
                raise config_error(config, "expected input and output indices to match")
            if inputs[index][0] != data_type:
                raise config_error(
                    config,
                    "expected input and output datatype to match, got "
                    f"{mc.DataType.Name(inputs[index][0])} and {mc.DataType.Name(data_type)}",
                )
            if inputs[index][1] != dims:
                raise config_error(
                    config, f"expected input and output shape to match, got {inputs[index][1]} and {dims}"
                )

    def create_instance(self, spec: InstanceSpec) -> IdentityInstance:
        self.refuse_gpu(spec)
        sleep_ms(1000 * max(0, int_parameter(spec.config, "creation_delay_sec", 0)))
        return IdentityInstance(spec)


class IdentityInstance:
    def __init__(self, spec: InstanceSpec) -> None:
        config = spec.config
        self._model = f"'{spec.model_name}' version {spec.version}"
        registry = spec.custom_metrics
        self._metrics = _ByteSizeCounter(registry, spec) if registry is not None else None
        self._batching = config.max_batch_size > 0
        delay = max(0, int_parameter(config, "execute_delay_ms", 0))
        multiplier = max(0, int_parameter(config, "instance_wise_delay_multiplier", 0))
        if multiplier > 0:
            multiplier *= _instance_index(spec.instance_name)
        self._delay_ms = delay * max(multiplier, 1)
        # Zeros for optional inputs: config dims, variable ones as 1 (Triton's identity does the same).
        self._optional = {
            tensor.name: (numpy_type(tensor.data_type), [d if d >= 0 else 1 for d in tensor_dims(tensor)])
            for tensor in config.input
            if tensor.optional
        }

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        sleep_ms(self._delay_ms)
        return per_request(requests, self._run)

    def _run(self, request: BackendRequest) -> Outputs:
        received = 0
        verbose = log.isEnabledFor(logging.DEBUG)
        for name, array in request.inputs.items():
            size = _byte_size(array)
            received += size
            if verbose:
                log.debug(
                    "identity model %s, request '%s': input %s, shape %s, byte_size = %d",
                    self._model,
                    request.id,
                    name,
                    list(array.shape),
                    size,
                )
        if self._metrics is not None:
            self._metrics.add(received)
        batch = 0
        if self._batching:
            for array in request.inputs.values():
                batch = int(array.shape[0]) if array.ndim else 1
                break
        outputs: Outputs = {}
        for name in request.outputs:
            input_name = "INPUT" + name[6:]
            given = request.inputs.get(input_name)
            if given is not None:
                outputs[name] = given
            elif input_name in self._optional:
                dtype, dims = self._optional[input_name]
                shape = [batch, *dims] if batch else dims
                outputs[name] = (
                    np.full(shape, b"", dtype=object) if dtype == np.object_ else np.zeros(shape, dtype)
                )
            else:
                raise Unsupported(f"failed to get input '{input_name}'")
        return OutputsWithParameters(outputs, RESPONSE_PARAMETERS)

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()


class _ByteSizeCounter:
    """The instance's hold on its model version's series of `input_byte_size_counter`."""

    def __init__(self, registry: CustomMetrics, spec: InstanceSpec) -> None:
        self._registry = registry
        self._family = registry.new_family(
            BYTE_SIZE_METRIC, "Sum of the byte sizes of the inputs each model version was sent", COUNTER
        )
        labels = {"model": spec.model_name, "version": str(spec.version)}
        self._metric = self._registry.new_metric(self._family, labels, None)

    def add(self, byte_size: int) -> None:
        self._registry.increment(self._metric, byte_size)

    def close(self) -> None:
        self._registry.delete_family(self._family)  # its metric handles go with it


def _byte_size(array: np.ndarray) -> int:
    """Bytes of a tensor as it travels: BYTES elements with their 4-byte length prefixes."""
    if array.dtype == np.object_:
        return len(serialize_bytes(array))
    return int(array.nbytes)


def _instance_index(instance_name: str) -> int:
    """The index Triton gives an instance within its group (`<group>_<index>`)."""
    tail = instance_name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def create_backend() -> IdentityBackend:
    return IdentityBackend()
