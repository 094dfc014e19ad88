"""What the small built-in backends (identity, sequence, dyna_sequence, repeat, square) share: no model
file, nothing to auto-complete, CPU instances only, and parameters read from the config.

Triton ships these as test backends; its own acceptance tests and many example repositories use them, so
Nereid serves them itself rather than asking users to build C++ libraries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import BackendRequest, InstanceSpec, Outputs
from nereid.backends.framework import int_parameter
from nereid.backends.responses import ResponseStream
from nereid.errors import ModelConfigError, NereidError, Unavailable, Unsupported


class BuiltinBackend:
    """Base for backends whose "model" is the configuration alone."""

    name = ""
    default_model_filename = ""  # no file: the version folder itself stands for the model
    requires_io = True

    def gpu_available(self) -> bool:
        return False

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        pass

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        pass

    def refuse_gpu(self, spec: InstanceSpec) -> None:
        if spec.kind == "GPU":
            # Triton's test backends give this text (with its status), which tools look for.
            raise Unavailable(
                f"Internal: GPU instances not supported (the '{self.name}' backend runs KIND_CPU instances only)"
            )


def config_error(config: mc.ModelConfig, message: str) -> ModelConfigError:
    return ModelConfigError(f"model '{config.name}': {message}")


def tensor_dims(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def delay_ms(config: mc.ModelConfig) -> int:
    """The `execute_delay_ms` parameter the test backends sleep for in each execution."""
    return max(0, int_parameter(config, "execute_delay_ms", 0))


def sleep_ms(milliseconds: float) -> None:
    if milliseconds > 0:
        time.sleep(milliseconds / 1000.0)


def scalar(request: BackendRequest, name: str) -> int:
    """The first element of a control input (START, END, READY, CORRID, WAIT)."""
    array = request.inputs.get(name)
    if array is None or array.size == 0:
        raise Unsupported(f"failed to get input '{name}'")
    return int(np.asarray(array).reshape(-1)[0])


class ResponderThreads:
    """Threads that send a decoupled request's responses after execute() returned, as the repeat and square
    backends do; closing the instance waits for them."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start(self, target: Callable[..., None], *args: object) -> None:
        def run() -> None:
            try:
                target(*args)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, daemon=True, name="nereid-responder")
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def join(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return
            threads[0].join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                return


def send(stream: ResponseStream, result: Outputs | NereidError | None, final: bool) -> None:
    """Put a response on a stream from any thread (streams live on the event loop)."""
    stream.loop.call_soon_threadsafe(stream.put, result, final)
