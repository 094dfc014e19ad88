"""TensorFlow backend (`platform: "tensorflow_savedmodel"` or `"tensorflow_graphdef"`).

SavedModels (`model.savedmodel`, a folder) run one signature (`serving_default`, or the
`TF_SIGNATURE_DEF` parameter), its input and output keys being the tensor names, as in Triton. Frozen
GraphDefs (`model.graphdef`) take operation names (`input`, or `op:1` for another output of an op); their
inputs are the Placeholders and, for auto-complete, their outputs the operations nothing consumes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter is not the server's log

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from nereid.backends import framework  # noqa: E402
from nereid.backends.base import BackendRequest, BackendResult, InstanceSpec, Outputs  # noqa: E402
from nereid.backends.framework import ModelTensor  # noqa: E402
from nereid.errors import InternalError, ModelConfigError, Unavailable  # noqa: E402

SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
_DEFAULT_FILES = {SAVEDMODEL: "model.savedmodel", GRAPHDEF: "model.graphdef"}
_NOT_OUTPUTS = {"NoOp", "Placeholder", "Const", "Assert", "VarHandleOp", "SaveV2", "RestoreV2"}

_TF_TYPES = {
    tf.bool: mc.TYPE_BOOL,
    tf.uint8: mc.TYPE_UINT8,
    tf.uint16: mc.TYPE_UINT16,
    tf.uint32: mc.TYPE_UINT32,
    tf.uint64: mc.TYPE_UINT64,
    tf.int8: mc.TYPE_INT8,
    tf.int16: mc.TYPE_INT16,
    tf.int32: mc.TYPE_INT32,
    tf.int64: mc.TYPE_INT64,
    tf.float16: mc.TYPE_FP16,
    tf.float32: mc.TYPE_FP32,
    tf.float64: mc.TYPE_FP64,
    tf.bfloat16: mc.TYPE_BF16,
    tf.string: mc.TYPE_STRING,
}


class TensorFlowBackend:
    name = "tensorflow"
    # The file depends on the platform: chosen by `model_path` from the version folder.
    default_model_filename = ""
    requires_io = True

    def gpu_available(self) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        if not config.platform:
            config.platform = _detect_platform(config, model_file)
        model = _load(config, model_path(config, model_file))
        framework.complete_io(config, model.inputs, model.outputs, default_max_batch_size)

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        if config.platform not in _DEFAULT_FILES:
            config.platform = _detect_platform(config, model_file)
        model = _load(config, model_path(config, model_file))
        framework.check_io(config, "input", config.input, model.inputs, require_all=True)
        if config.platform == SAVEDMODEL:
            framework.check_io(config, "output", config.output, model.outputs, require_all=False)

    def create_instance(self, spec: InstanceSpec) -> TensorFlowInstance:
        return TensorFlowInstance(spec, self.gpu_available())


class _Loaded:
    """A callable model with its tensors as it describes them."""

    def __init__(self, inputs: list[ModelTensor], outputs: list[ModelTensor], keep: Any) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.keep = keep  # the SavedModel object (its variables) or the wrapped GraphDef


class TensorFlowInstance:
    def __init__(self, spec: InstanceSpec, gpu_available: bool) -> None:
        config = spec.config
        self._model_name = spec.model_name
        if spec.kind == "GPU":
            if not gpu_available:
                raise framework.no_gpu(spec, "TensorFlow", "install tensorflow with CUDA on a GPU host")
            self._device = f"/GPU:{spec.device_id}"
        else:
            self._device = "/CPU:0"
        with tf.device(self._device):
            self._model = _load(config, model_path(config, spec.model_file))
        self._input_names = [i.name for i in config.input]
        self._output_names = [o.name for o in config.output]
        self._output_types = {o.name: framework.numpy_type(o.data_type) for o in config.output}
        if config.platform == SAVEDMODEL:
            self._function = self._model.keep[1]
        else:
            graph = self._model.keep.graph
            try:
                self._function = self._model.keep.prune(
                    feeds=[graph.get_tensor_by_name(_tensor_name(n)) for n in self._input_names],
                    fetches=[graph.get_tensor_by_name(_tensor_name(n)) for n in self._output_names],
                )
            except (KeyError, ValueError) as exc:
                raise ModelConfigError(f"model '{spec.model_name}': {exc}") from None

    def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return framework.execute(requests, self._run_request)

    def _run_request(self, request: BackendRequest) -> Outputs:
        try:
            with tf.device(self._device):
                if isinstance(self._model.keep, tuple):  # SavedModel signature: keyword arguments
                    result = self._function(**{n: tf.constant(a) for n, a in request.inputs.items()})
                    values = {n: result[n] for n in request.outputs}
                else:
                    fetched = self._function(*[tf.constant(request.inputs[n]) for n in self._input_names])
                    values = dict(zip(self._output_names, fetched, strict=True))
        except (tf.errors.OpError, TypeError, ValueError) as exc:
            raise InternalError(f"TensorFlow error while running model '{self._model_name}': {exc}") from None
        outputs: Outputs = {}
        for name in request.outputs:
            array = np.asarray(values[name].numpy())
            expected = self._output_types[name]
            if array.dtype != expected:
                raise InternalError(
                    f"model '{self._model_name}': output '{name}' is {array.dtype} but the configuration "
                    f"says {expected}"
                )
            outputs[name] = array
        return outputs

    def close(self) -> None:
        del self._function, self._model


def create_backend() -> TensorFlowBackend:
    return TensorFlowBackend()


def model_path(config: mc.ModelConfig, model_file: Path) -> Path:
    """The model file: the configured one, else the platform's default in the version folder."""
    if config.default_model_filename:
        return model_file
    return model_file / _DEFAULT_FILES.get(config.platform, _DEFAULT_FILES[SAVEDMODEL])


def _detect_platform(config: mc.ModelConfig, model_file: Path) -> str:
    """`backend: "tensorflow"` without a platform: whichever of the two default files is there."""
    folder = model_file if not config.default_model_filename else model_file.parent
    if config.default_model_filename.endswith(".graphdef") or (folder / _DEFAULT_FILES[GRAPHDEF]).exists():
        return GRAPHDEF
    return SAVEDMODEL


def _load(config: mc.ModelConfig, path: Path) -> _Loaded:
    if not path.exists():
        raise framework.model_file_missing(path)
    try:
        if config.platform == GRAPHDEF:
            return _load_graphdef(path)
        return _load_savedmodel(config, path)
    except (ModelConfigError, Unavailable):
        raise
    except Exception as exc:  # TensorFlow's errors carry the reason
        raise Unavailable(f"failed to load '{path}': {exc}") from None


def _load_savedmodel(config: mc.ModelConfig, path: Path) -> _Loaded:
    parameters = framework.parameters(config)
    signature_name = parameters.get("TF_SIGNATURE_DEF", "serving_default")
    tags = parameters.get("TF_GRAPH_TAG", "serve")
    loaded = tf.saved_model.load(str(path), tags=[tags])
    if signature_name not in loaded.signatures:
        raise ModelConfigError(
            f"model '{config.name}': the SavedModel has no signature '{signature_name}' "
            f"(it has {sorted(loaded.signatures)}); choose one with the TF_SIGNATURE_DEF parameter"
        )
    function = loaded.signatures[signature_name]
    _, keywords = function.structured_input_signature
    inputs = [_spec_tensor(name, spec) for name, spec in sorted(keywords.items())]
    outputs = [_spec_tensor(name, spec) for name, spec in sorted(function.structured_outputs.items())]
    return _Loaded(inputs, outputs, (loaded, function))


def _load_graphdef(path: Path) -> _Loaded:
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())

    def _import() -> None:
        tf.compat.v1.import_graph_def(graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    graph = wrapped.graph
    consumed = {i.split(":")[0].lstrip("^") for node in graph_def.node for i in node.input}
    inputs = [_graph_tensor(graph, n.name) for n in graph_def.node if n.op == "Placeholder"]
    outputs = [
        _graph_tensor(graph, n.name)
        for n in graph_def.node
        if n.name not in consumed and n.op not in _NOT_OUTPUTS and graph.get_operation_by_name(n.name).outputs
    ]
    return _Loaded(inputs, outputs, wrapped)


def _spec_tensor(name: str, spec: Any) -> ModelTensor:
    shape = None if spec.shape.rank is None else tuple(-1 if d is None else int(d) for d in spec.shape)
    return ModelTensor(name, _TF_TYPES.get(spec.dtype, mc.TYPE_INVALID), shape)


def _graph_tensor(graph: Any, name: str) -> ModelTensor:
    tensor = graph.get_tensor_by_name(_tensor_name(name))
    shape = None if tensor.shape.rank is None else tuple(-1 if d is None else int(d) for d in tensor.shape)
    return ModelTensor(name, _TF_TYPES.get(tensor.dtype, mc.TYPE_INVALID), shape)


def _tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"
