"""Python backend (`backend: "python"`): Triton's model.py files, each instance in a worker process, or
on a thread of the server process itself.

Settings, from `--backend-config=python,<key>=<value>` (server-wide) and from the model's config
`parameters` (per model, taking precedence):

- `EXECUTION_MODE` / `execution-mode`: `process` (the default, as in Triton) runs each instance in a worker
  process; `thread` runs model.py inside the server process, each instance on a thread of its own
  (inprocess.py). Thread mode saves each request the hop to a worker and back, which is most of what a
  light model costs the server's CPU; in exchange, a crash in model code takes the server down, an
  execution that hangs holds its instance (no execute timeout applies), and the model's Python code
  shares the GIL with the frontends. It suits models that are light or that release the GIL.
- `EXECUTION_ENV_PATH` (model): the environment whose Python runs the workers (folder or conda-pack archive);
  process mode only.
- `execute-timeout-seconds` / `EXECUTE_TIMEOUT_SECONDS`: an execution running longer fails, and its worker
  is killed and restarted. Default 0: no limit, as in Triton.
- `stuck-execution-seconds` / `STUCK_EXECUTION_SECONDS` (beyond Triton): while an execution has run
  longer than this, the model reports not ready (its readiness and `/v2/health/ready` say so, with the
  reason in the repository index), so that a load balancer can steer clear of a hung model before (or
  without) an execute timeout. Default 0: off.
- `stub-timeout-seconds` (Triton's name): how long control exchanges may take (finalize at unload).
- `shm-default-byte-size` (Triton's name): the initial size of each shared-memory arena; they grow on
  demand.
- `busy-wait-microseconds`: how long a worker that finished an execution polls for the next request
  before it sleeps; the event loop keeps turning for as long (250 at most) while it waits for a lone
  execution. Waking a sleeping process costs tens of microseconds, more than a small model takes;
  polling trades that for CPU time. Each side polls only while the waits it has seen lately were
  short enough for polling to pay (under twice the window), so sparse traffic and slow models cost
  no polling; a worker also polls only after an execution the server sent with none ahead of it (under
  load the server keeps it fed and needs the CPU itself). Default 500, or 0 where the host's idle CPUs
  poll before they halt (`nereid.host.idle_cpus_poll_before_halting`: the kernel then keeps a CPU awake
  for the next wake-up, and polling here only adds CPU); 0 turns polling off, on both sides.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import InstanceSpec
from nereid.backends.python.environment import worker_python
from nereid.backends.python.inprocess import ThreadInstance
from nereid.backends.python.instance import PythonInstance
from nereid.backends.python.process import WorkerLaunch, WorkerProcess, start_worker
from nereid.backends.python.worker import wire
from nereid.errors import ModelConfigError, Unavailable
from nereid.host import idle_cpus_poll_before_halting
from nereid.model_config import config_from_json, config_to_json

log = logging.getLogger("nereid.backends.python")

POLLING_BUSY_WAIT_US = 500  # the default where idle CPUs halt at once (see `default_busy_wait_us`)
SPARE_LIFETIME_S = 10.0
STOP_TIMEOUT_S = 5.0  # for a spare worker, which runs no model code at finalize


class PythonBackend:
    name = "python"
    default_model_filename = "model.py"
    requires_io = False  # Triton loads Python models that declare no inputs or outputs

    def __init__(self) -> None:
        self._spares = _SpareWorkers()

    def gpu_available(self) -> bool:
        return False  # KIND_AUTO instances are CPU instances, as in Triton's CPU-only builds

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        """Run the model's static `auto_complete_config` in a worker of its own, as Triton does. The worker
        then waits (briefly) for the model's first instance, which saves starting another Python."""
        if not model_file.exists():
            raise Unavailable(f"model file not found: '{model_file}'")
        execution_mode(config, {})  # a model's own EXECUTION_MODE that cannot be is refused first
        launch = _launch(config, model_file.parent.parent, {})
        label = f"model '{config.name}' (auto-complete)"
        request = (wire.AUTO_COMPLETE, str(model_file), _dumps(config_to_json(config)))
        worker, reply = start_worker(launch, label, request, _auto_complete_error(config.name), wire.CONFIG)
        self._spares.park((str(model_file), launch.python), worker, launch.stub_timeout_s)
        config.CopyFrom(config_from_json(_loads(reply[1])))

    def check(self, config: mc.ModelConfig, model_file: Path) -> None:
        pass

    def create_instance(self, spec: InstanceSpec) -> PythonInstance | ThreadInstance:
        if execution_mode(spec.config, spec.backend_config) == "thread":
            self._spares.discard(str(spec.model_file))  # the auto-complete worker: not needed
            if _launch(spec.config, spec.model_dir, spec.backend_config).execute_timeout_s > 0:
                log.warning(
                    "model '%s': the execute timeout does not apply in EXECUTION_MODE 'thread' (a thread "
                    "cannot be stopped); executions run to their end",
                    spec.model_name,
                )
            return ThreadInstance(spec, _dumps(config_to_json(spec.config)))
        launch = _launch(spec.config, spec.model_dir, spec.backend_config)
        spare = self._spares.take((str(spec.model_file), launch.python))
        return PythonInstance(spec, launch, _dumps(config_to_json(spec.config)), spare)


class PythonBasedBackend(PythonBackend):
    """A Python-based backend (`<backend-directory>/<name>/model.py`): that one model.py serves every model
    whose config says `backend: "<name>"`, from version folders that need no file of their own."""

    default_model_filename = ""

    def __init__(self, name: str, script: Path) -> None:
        super().__init__()
        self.name = name
        self.script = script

    def auto_complete(self, config: mc.ModelConfig, model_file: Path, default_max_batch_size: int) -> None:
        super().auto_complete(config, self.script, default_max_batch_size)

    def create_instance(self, spec: InstanceSpec) -> PythonInstance | ThreadInstance:
        return super().create_instance(dataclasses.replace(spec, model_file=self.script))


class _SpareWorkers:
    """Workers that ran a model's auto-complete, kept for its first instance. One not taken within
    SPARE_LIFETIME_S (the load failed before instances were made) is stopped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[tuple[str, str], tuple[WorkerProcess, threading.Timer]] = {}

    def park(self, key: tuple[str, str], worker: WorkerProcess, stop_timeout_s: float) -> None:
        timer = threading.Timer(SPARE_LIFETIME_S, self._expire, (key, worker, stop_timeout_s))
        timer.daemon = True
        with self._lock:
            previous = self._workers.pop(key, None)
            self._workers[key] = (worker, timer)
        timer.start()
        if previous is not None:
            previous[1].cancel()
            previous[0].stop(stop_timeout_s)

    def discard(self, model_file: str) -> None:
        with self._lock:
            keys = [key for key in self._workers if key[0] == model_file]
            parked = [self._workers.pop(key) for key in keys]
        for worker, timer in parked:
            timer.cancel()
            worker.stop(STOP_TIMEOUT_S)

    def take(self, key: tuple[str, str]) -> WorkerProcess | None:
        with self._lock:
            parked = self._workers.pop(key, None)
        if parked is None:
            return None
        parked[1].cancel()
        return parked[0]

    def _expire(self, key: tuple[str, str], worker: WorkerProcess, stop_timeout_s: float) -> None:
        with self._lock:
            parked = self._workers.get(key)
            if parked is None or parked[0] is not worker:
                return
            del self._workers[key]
        worker.stop(stop_timeout_s)


def create_backend() -> PythonBackend:
    return PythonBackend()


def execution_mode(config: mc.ModelConfig, backend_config: Mapping[str, str]) -> str:
    """`process` or `thread`: the model's EXECUTION_MODE, else the server-wide execution-mode."""
    parameters = config.parameters
    own = parameters["EXECUTION_MODE"].string_value if "EXECUTION_MODE" in parameters else ""
    mode = (own or backend_config.get("execution-mode") or "process").strip().lower()
    source = "parameter 'EXECUTION_MODE'" if own else "--backend-config=python,execution-mode"
    if mode not in ("process", "thread"):
        raise ModelConfigError(
            f"model '{config.name}': {source} must be 'process' or 'thread', got '{own or mode}'"
        )
    if mode == "thread" and "EXECUTION_ENV_PATH" in parameters:
        raise ModelConfigError(
            f"model '{config.name}': EXECUTION_MODE 'thread' (from {source}) runs model.py in the server's "
            "own Python, so it cannot use the environment that parameter 'EXECUTION_ENV_PATH' names; set "
            "parameter 'EXECUTION_MODE' to 'process' for this model, or remove 'EXECUTION_ENV_PATH'"
        )
    return mode


def _launch(config: mc.ModelConfig, model_dir: Path, backend_config: Mapping[str, str]) -> WorkerLaunch:
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    python, environment = worker_python(parameters.get("EXECUTION_ENV_PATH", ""), model_dir)

    def number(model_key: str, backend_key: str, default: float) -> float:
        text = parameters.get(model_key) or backend_config.get(backend_key)
        if not text:
            return default
        try:
            value = float(text)
        except ValueError:
            raise ModelConfigError(
                f"model '{config.name}': '{model_key if model_key in parameters else backend_key}' must be a "
                f"number, got '{text}'"
            ) from None
        if value < 0:
            raise ModelConfigError(f"model '{config.name}': '{model_key}' must not be negative, got '{text}'")
        return value

    return WorkerLaunch(
        python=python,
        environment=environment,
        arena_size=max(4096, int(number("", "shm-default-byte-size", 1 << 20))),
        stub_timeout_s=number("", "stub-timeout-seconds", 30.0) or 30.0,
        execute_timeout_s=number("EXECUTE_TIMEOUT_SECONDS", "execute-timeout-seconds", 0.0),
        stuck_after_s=number("STUCK_EXECUTION_SECONDS", "stuck-execution-seconds", 0.0),
        busy_wait_us=int(number("", "busy-wait-microseconds", default_busy_wait_us())),
    )


def default_busy_wait_us() -> int:
    """How long workers (and the event loop, up to its limit) poll unless `busy-wait-microseconds` says:
    only where the kernel does not poll for them."""
    return 0 if idle_cpus_poll_before_halting() else POLLING_BUSY_WAIT_US


def _auto_complete_error(model: str) -> Callable[[str], ModelConfigError]:
    def error(message: str) -> ModelConfigError:
        return ModelConfigError(f"auto-complete of model '{model}' failed: {message}")

    return error


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


def _loads(text: str) -> dict[str, Any]:
    loaded = orjson.loads(text)
    if not isinstance(loaded, dict):
        raise ModelConfigError("auto_complete_config returned something other than a configuration")
    return loaded
