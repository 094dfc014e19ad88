"""ONNX Runtime backend (`platform: "onnxruntime_onnx"` / `backend: "onnxruntime"`): a session per instance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends import framework
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs, batch_elements
from nereid.backends.batch_inputs import batch_input_tensors, flatten_ragged
from nereid.backends.framework import ModelTensor
from nereid.errors import InternalError, InvalidArgument, ModelConfigError, NereidError, Unavailable

# ONNX type strings -> config data types
_ONNX_TYPES = {
    "tensor(bool)": mc.TYPE_BOOL,
    "tensor(uint8)": mc.TYPE_UINT8,
    "tensor(uint16)": mc.TYPE_UINT16,
    "tensor(uint32)": mc.TYPE_UINT32,
    "tensor(uint64)": mc.TYPE_UINT64,
    "tensor(int8)": mc.TYPE_INT8,
    "tensor(int16)": mc.TYPE_INT16,
    "tensor(int32)": mc.TYPE_INT32,
    "tensor(int64)": mc.TYPE_INT64,
    "tensor(float16)": mc.TYPE_FP16,
    "tensor(float)": mc.TYPE_FP32,
    "tensor(double)": mc.TYPE_FP64,
    "tensor(bfloat16)": mc.TYPE_BF16,
    "tensor(string)": mc.TYPE_STRING,
}


class OnnxRuntimeBackend:
    name = "onnxruntime"
    default_model_filename = "model.onnx"
    requires_io = True

    def gpu_available(self) -> bool:
        return "CUDAExecutionProvider" in ort.get_available_providers()

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        session = _metadata_session(model_file)
        framework.complete_io(
            config,
            _model_tensors(session.get_inputs()),
            _model_tensors(session.get_outputs()),
            default_max_batch_size,
            omit_inputs=_batch_input_targets(config),
        )

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        session = _metadata_session(model_file)
        inputs, outputs = _model_tensors(session.get_inputs()), _model_tensors(session.get_outputs())
        framework.check_io(
            config, "input", config.input, inputs, True, _batch_input_targets(config), _check_dims
        )
        framework.check_io(config, "output", config.output, outputs, False, dims_check=_check_dims)

    def create_instance(self, spec: InstanceSpec) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(spec, self.gpu_available())


class OnnxRuntimeInstance:
    def __init__(self, spec: InstanceSpec, gpu_available: bool) -> None:
        options = _session_options(spec.config)
        if spec.kind == "GPU":
            if not gpu_available:
                raise framework.no_gpu(spec, "ONNX Runtime", "install onnxruntime-gpu on a GPU host")
            providers: list = [
                ("CUDAExecutionProvider", {"device_id": spec.device_id}),
                "CPUExecutionProvider",
            ]
        else:
            providers = ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(str(spec.model_file), options, providers=providers)
        except Exception as exc:  # ORT raises its own exception types; report the reason whole
            raise Unavailable(f"failed to load model '{spec.model_name}': {exc}") from None
        # InferenceSession.run wraps the binding's run in four Python-level checks per call, all of which
        # the request checks have made already; on microsecond models they cost as much as the model.
        # Both take (output names, feed, run options).
        binding: Any = getattr(self._session, "_sess", None)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self._session.run
        model_inputs, model_outputs = self._session.get_inputs(), self._session.get_outputs()
        self._string_inputs = {i.name for i in model_inputs if i.type == "tensor(string)"}
        self._string_outputs = {o.name for o in model_outputs if o.type == "tensor(string)"}
        # Scalars in the model, given as dims of 1s in the configuration (Triton's rule): inputs lose those
        # dims on the way in, outputs get them back.
        self._scalar_inputs = {i.name for i in model_inputs if i.shape == []}
        scalar_outputs = {o.name for o in model_outputs if o.shape == []}
        self._scalar_outputs = {o.name: tuple(o.dims) for o in spec.config.output if o.name in scalar_outputs}
        # Ragged batching: such inputs reach the model as one row, with the batch inputs it asks for; each
        # request runs as a batch of its own here. Outputs named by BATCH_SCATTER_WITH_INPUT_SHAPE take the
        # shape of their source input.
        self._ragged = [i.name for i in spec.config.input if i.allow_ragged_batch]
        self._batch_inputs = list(spec.config.batch_input)
        self._scatter = {
            target: b.source_input[0]
            for b in spec.config.batch_output
            if b.kind == mc.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE and b.source_input
            for target in b.target_name
        }
        self._model_name = spec.model_name

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if self._ragged or self._batch_inputs:
            return self._run_ragged(requests)
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        inputs, outputs = request.inputs, request.outputs
        feed = inputs
        if self._scalar_inputs:
            feed = {name: a.reshape(()) if name in self._scalar_inputs else a for name, a in inputs.items()}
        if self._string_inputs:
            feed = {
                name: _to_ort_strings(name, a) if name in self._string_inputs else a
                for name, a in feed.items()
            }
        try:
            results = self._run(outputs if isinstance(outputs, list) else list(outputs), feed, None)
        except Exception as exc:  # ORT's RuntimeException & co carry the useful text
            raise InternalError(
                f"onnx runtime error while running model '{self._model_name}': {exc}"
            ) from None
        out: Outputs = dict(zip(outputs, results, strict=True))
        for name in self._string_outputs.intersection(out):
            out[name] = _from_ort_strings(out[name])
        for name in self._scalar_outputs.keys() & out.keys():
            out[name] = out[name].reshape(self._scalar_outputs[name])
        return out

    def _run_ragged(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """One model call for the whole batch: ragged inputs joined into one row, the batch inputs computed
        over every request; outputs split by each request's batch size (scatter outputs by the elements of
        their source input, in its shape). It lives here: no other backend serves ragged batches."""
        batch = [request.inputs for request in requests]
        inputs: dict[str, np.ndarray] = {}
        for name in requests[0].inputs:
            if name in self._ragged:
                inputs[name] = flatten_ragged(batch, name)
            else:
                inputs[name] = np.concatenate([r[name] for r in batch]) if len(batch) > 1 else batch[0][name]
        try:
            inputs.update(batch_input_tensors(self._batch_inputs, batch))
            outputs = self._run_request(BackendRequest(inputs, requests[0].outputs))
        except NereidError as exc:
            return [exc for _ in requests]
        results: list[BackendResult] = [{} for _ in requests]
        for name, array in outputs.items():
            source = self._scatter.get(name)
            sizes = [
                r[source].size if source else batch_elements(request)
                for r, request in zip(batch, requests, strict=True)
            ]
            offsets = np.cumsum([0, *sizes])
            for index, result in enumerate(results):
                piece = array[offsets[index] : offsets[index + 1]]
                result[name] = piece.reshape(batch[index][source].shape) if source else piece  # type: ignore[index]
        return results

    def close(self) -> None:
        del self._session


def create_backend() -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend()


def _metadata_session(model_file: Path) -> ort.InferenceSession:
    if not model_file.exists():
        raise framework.model_file_missing(model_file)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise Unavailable(f"failed to load '{model_file}': {exc}") from None


def _session_options(config: mc.ModelConfig) -> ort.SessionOptions:
    """The session options Triton's ONNX Runtime backend takes from the config: thread counts, execution
    mode and graph optimization level."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # ORT's intra-op threads spin between runs by default, burning the CPU that other instances and
    # the HTTP loop need; servers run many short inferences, so they wait instead.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # Triton sets a thread count above 0 and leaves 0 to ORT (a thread per core, pinned to it). An intra-op
    # count left out is the instance's share of the cores instead: ORT's pick in each instance (two by
    # default) would run more threads than a small host has cores. Inter-op threads run only in parallel
    # mode, which asks for them; there ORT's pick stays the default.
    intra = framework.int_parameter(config, "intra_op_thread_count", framework.threads_per_instance(config))
    inter = framework.int_parameter(config, "inter_op_thread_count", 0)
    if intra > 0:
        options.intra_op_num_threads = intra
    if inter > 0:
        options.inter_op_num_threads = inter
    # Nodes one after the other (0, ORT's default) or side by side on the inter-op threads (1).
    mode = framework.int_parameter(config, "execution_mode", 0)
    if mode not in (0, 1):
        raise ModelConfigError(
            f"model '{config.name}': parameter 'execution_mode' must be 0 (sequential) or 1 (parallel), "
            f"got {mode}"
        )
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if mode else ort.ExecutionMode.ORT_SEQUENTIAL
    # Triton's graph levels: -1 basic, 1 extended, 2 none; others (0, left out) all of them.
    level = config.optimization.graph.level
    if level == -1:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif level == 1:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    elif level == 2:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def _batch_input_targets(config: mc.ModelConfig) -> set[str]:
    """The server computes these inputs (ragged batching), so the config does not list them."""
    return {name for batch_input in config.batch_input for name in batch_input.target_name}


def _model_tensors(tensors: Sequence[Any]) -> list[ModelTensor]:
    """ORT's view of its tensors: symbolic or unknown dims (names, None) are variable; the type is named
    as ONNX names it, so that an ONNX type Triton lacks is refused by name."""
    return [
        ModelTensor(
            t.name,
            _ONNX_TYPES.get(t.type, mc.TYPE_INVALID),
            tuple(d if isinstance(d, int) and d >= 0 else -1 for d in t.shape),
            t.type,
        )
        for t in tensors
    ]


def _check_dims(config: mc.ModelConfig, kind: str, tensor: Any, model_shape: Sequence[int]) -> None:
    """Triton's ONNX Runtime backend's shape rules ahead of the common comparison; only this backend
    serves ragged batches and scalars given as dims of 1s."""
    if kind == "output" and any(tensor.name in b.target_name for b in config.batch_output):
        return  # a batch output's shape need not match the model's
    if kind == "input" and tensor.allow_ragged_batch:
        # a ragged input reaches the model as the whole batch's elements in one row
        if list(model_shape) != [-1]:
            raise ModelConfigError(
                f"unable to load model '{config.name}', configuration expects model provides input with "
                f"shape [-1] for ragged input '{tensor.name}', model provides "
                f"[{','.join(str(d) for d in model_shape)}]"
            )
        return
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    if not model_shape and config.max_batch_size == 0:
        # a scalar: the configuration gives it as dims of 1s ([1], [1, 1], ...)
        if any(d != 1 for d in dims):
            raise ModelConfigError(
                f"unable to load model '{config.name}', scalar tensor '{tensor.name}', should only provide 1 "
                "in the model configuration when the model doesn't support batching. Model configuration "
                f"provided: {dims}."
            )
        return
    framework.check_dims(config, kind, tensor, model_shape)


def _to_ort_strings(name: str, array: np.ndarray) -> np.ndarray:
    """ONNX Runtime wants str elements; BYTES tensors carry bytes."""
    try:
        return np.vectorize(lambda b: b.decode("utf-8") if isinstance(b, bytes) else str(b), otypes=[object])(
            array
        )
    except UnicodeDecodeError:
        raise InvalidArgument(f"input '{name}': ONNX Runtime string tensors must hold UTF-8 text") from None


def _from_ort_strings(array: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda s: s.encode("utf-8") if isinstance(s, str) else bytes(s), otypes=[object])(
        array
    )
