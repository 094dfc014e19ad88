"""Backends, imported only when a model needs them."""

from __future__ import annotations

import importlib
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import AsyncModelInstance, Backend, BackendRequest, InstanceSpec, ModelInstance
from nereid.errors import ModelConfigError, Unsupported

# platform -> backend, as Triton maps its legacy platform names.
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
    "tensorrt_plan": "tensorrt",
}
BACKEND_PLATFORMS = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}

# backend -> (module[:factory], the pip extra that provides it); the factory defaults to create_backend
_MODULES = {
    "onnxruntime": ("nereid.backends.onnxruntime", "onnx"),
    "python": ("nereid.backends.python", ""),
    "pytorch": ("nereid.backends.pytorch", "torch"),
    "tensorflow": ("nereid.backends.tensorflow", "tensorflow"),
    "openvino": ("nereid.backends.openvino", "openvino"),
    "fil": ("nereid.backends.fil", "trees"),
    "tensorrt": ("nereid.backends.tensorrt", "tensorrt"),
    # Triton's test and example backends, which its own test suites and many tutorials use
    "identity": ("nereid.backends.identity", ""),
    "sequence": ("nereid.backends.sequence", ""),
    "dyna_sequence": ("nereid.backends.sequence:create_dyna_backend", ""),
    "repeat": ("nereid.backends.decoupled:create_repeat_backend", ""),
    "square": ("nereid.backends.decoupled:create_square_backend", ""),
}

# Model file suffixes that identify the backend when the config names none.
_DETECT = {
    ".onnx": "onnxruntime",
    ".py": "python",
    ".pt": "pytorch",
    ".plan": "tensorrt",
    ".savedmodel": "tensorflow",
    ".graphdef": "tensorflow",
}

_loaded: dict[str, Backend] = {}
_python_based_backends: dict[Path, Backend] = {}


def backend_name(config: mc.ModelConfig, model_dir: Path, version_dirs: list[Path]) -> str:
    """Which backend serves this model: `backend`, else `platform`, else `<name>.<backend>`, else files."""
    if config.backend:
        return config.backend
    if config.platform:
        if config.platform in PLATFORM_BACKENDS:
            return PLATFORM_BACKENDS[config.platform]
        raise Unsupported(f"unexpected platform type '{config.platform}' for model '{config.name}'")
    if "." in model_dir.name:
        return model_dir.name.rsplit(".", 1)[1]
    names = (
        [config.default_model_filename] if config.default_model_filename else [f"model{s}" for s in _DETECT]
    )
    for version_dir in version_dirs:
        for name in names:
            backend = _DETECT.get(Path(name).suffix)
            if backend is not None and (version_dir / name).exists():
                return backend
    raise ModelConfigError(
        f"model '{model_dir.name}': the configuration names no 'platform' or 'backend', and no known "
        f"model file ({', '.join(names)}) was found to pick one"
    )


def get_backend(name: str, backend_directory: Path | None = None) -> Backend:
    """The backend called `name`: a built-in one, else a Python-based backend, `<backend_directory>/<name>/
    model.py`, that serves every model naming it (Triton's Python-based backends)."""
    if name in _loaded:
        return _loaded[name]
    if name not in _MODULES:
        script = backend_directory / name / "model.py" if backend_directory is not None else None
        if script is not None and script.is_file():
            return _python_based(name, script)
        supported = ", ".join(sorted(_MODULES))
        where = f", and {backend_directory}/{name}/model.py does not exist" if backend_directory else ""
        raise Unsupported(f"backend '{name}' is not supported (supported backends: {supported}{where})")
    module_name, extra = _MODULES[name]
    module_name, _, factory = module_name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise Unsupported(
            f"backend '{name}' needs a package that is not installed ({exc.name}): "
            f"pip install 'nereid[{extra}]'"
        ) from None
    backend: Backend = getattr(module, factory or "create_backend")()
    _loaded[name] = backend
    return backend


def _python_based(name: str, script: Path) -> Backend:
    script = script.resolve()
    if script not in _python_based_backends:
        from nereid.backends.python import PythonBasedBackend

        _python_based_backends[script] = PythonBasedBackend(name, script)
    return _python_based_backends[script]


__all__ = [
    "AsyncModelInstance",
    "Backend",
    "BackendRequest",
    "InstanceSpec",
    "ModelInstance",
    "backend_name",
    "get_backend",
]
