"""The worker process: loads model.py, then answers the server's frames one at a time until told to stop.

Model code sees Triton's environment: `triton_python_backend_utils` importable, the version folder on
sys.path, `execute(requests)` returning one InferenceResponse per request.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from types import ModuleType
from typing import Any

from . import pb_utils, wire
from .channel import Channel
from .errors import status_name
from .numpy_compat import restore_numpy1_aliases

_HERE = os.path.dirname(os.path.abspath(__file__))
_SMOOTHING = 0.2
_MODULES: dict[str, ModuleType] = {}  # model.py path -> its module, imported in this worker


def describe(exc: BaseException) -> str:
    """An exception as Triton reports one: type, message, and the model's frames, innermost first."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_HERE)]
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(exc).__name__}: {exc}\n\nAt:\n{lines}"


def load_module(model_file: str) -> ModuleType:
    """Import model.py with its version folder on sys.path (at the end, as Triton puts it). Once per
    process: a worker that ran auto-complete and then serves the model imports it once, like a fresh one."""
    loaded = _MODULES.get(model_file)
    if loaded is not None:
        return loaded
    version_dir = os.path.dirname(os.path.abspath(model_file))
    name = f"{os.path.basename(version_dir)}.{os.path.splitext(os.path.basename(model_file))[0]}"
    module = _MODULES[model_file] = import_model(model_file, name)
    return module


def import_model(model_file: str, name: str) -> ModuleType:
    """Import model.py as module `name`, its version folder on sys.path; it must define TritonPythonModel."""
    version_dir = os.path.dirname(os.path.abspath(model_file))
    if version_dir not in sys.path:
        sys.path.append(version_dir)
    spec = importlib.util.spec_from_file_location(name, model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load '{model_file}' as a Python module")
    module = importlib.util.module_from_spec(spec)
    restore_numpy1_aliases()  # model code written for NumPy 1 (np.NINF, np.NaN, ...) runs unchanged
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        if not hasattr(module, "TritonPythonModel"):
            raise AttributeError(f"'{model_file}' defines no class TritonPythonModel")
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = wire.FrameReader()
        self._send_lock = threading.Lock()
        self._channel = Channel(sock, self._reader, self.send)
        self._decoupled = False
        self._model: Any = None
        self._instance_name = ""
        self._inputs: list[wire.Arena | None] = []  # the server's arenas, by slot
        self._outputs: list[wire.TensorWriter] = []  # ours, by slot
        self._arena_size = 0
        self._loop: Any = None  # an asyncio loop, made when model code first returns an awaitable
        self._busy_wait_s = 0.0
        self._gap_s = 0.0  # smoothed wait between the end of one frame's work and the next frame
        self._poll_after = False  # the last execution came with nothing ahead of it (see _next)
        self._readable = select.poll()  # where the worker sleeps until the server writes (see _receive)
        self._readable.register(sock, select.POLLIN)

    # transport
    def send(self, message: tuple, fd: int = -1) -> None:
        frame = wire.encode(message)
        with self._send_lock:  # Logger calls may come from the model's own threads
            wire.send(self._sock, frame, fd)

    def _next(self) -> tuple | None:
        channel = self._channel
        with channel.read_lock:  # model threads waiting on the server read while this one does not
            if not channel.frames:
                waited = time.perf_counter()
                # Poll only while requests have been coming soon enough for it to pay, and after an
                # execution the server sent with nothing ahead of it: with sparse traffic, a machine too
                # busy to answer in time, or a server with requests queued (busy itself, keeping this
                # worker fed), the worker sleeps at once.
                if self._poll_after and self._gap_s < 2 * self._busy_wait_s:
                    self._poll(self._busy_wait_s)
                while not channel.frames:
                    frames = self._receive()
                    if frames is None:
                        channel.closed = True
                        return None
                    channel.deliver(frames)
                self._gap_s += _SMOOTHING * (time.perf_counter() - waited - self._gap_s)
            return channel.frames.pop(0)

    def _receive(self) -> list[tuple] | None:
        """The frames of the next read, once the server wrote. The worker sleeps in poll(), not in a blocking
        recvmsg: a reader blocked there is also woken each time the server reads what this worker sent (the
        kernel wakes a Unix socket's waiters when its peer frees send space), a second sleep and wake-up an
        execution, where poll() wakes for input alone. Polled first even when input waits: one cheap call,
        where a read that finds nothing would cost an exception."""
        while True:
            self._readable.poll()
            try:
                # Non-blocking for this read only: model threads may be sending logs on the socket.
                return wire.receive(self._sock, self._reader, socket.MSG_DONTWAIT)
            except BlockingIOError:  # woken with nothing to read after all: sleep again
                continue

    def _poll(self, seconds: float) -> None:
        """Look for the next frame for a while before sleeping on the socket: waking a sleeping process
        costs the server more than the frame itself, when requests follow each other closely."""
        deadline = time.perf_counter() + seconds
        channel = self._channel
        while time.perf_counter() < deadline:
            try:
                # Non-blocking for this read only: model threads may be sending logs on the socket.
                frames = wire.receive(self._sock, self._reader, socket.MSG_DONTWAIT)
            except BlockingIOError:
                os.sched_yield()  # let whatever else wants this CPU have it
                continue
            if frames is None:
                return  # end of stream: the blocking read sees it too
            channel.deliver(frames)
            if channel.frames:
                return

    def _log(self, level: int, message: str) -> None:
        self.send((wire.LOG, level, message))  # the server's log level decides what shows

    # the frames
    def serve(self) -> int:
        while True:
            pb_utils._flush_releases()
            frame = self._next()
            if frame is None:  # the server went away
                return 0
            kind = frame[0]
            if kind == wire.EXECUTE:
                self._execute(frame)
            elif kind == wire.INIT:
                self._initialize(*frame[1:])
            elif kind == wire.AUTO_COMPLETE:
                self._auto_complete(*frame[1:])
            elif kind == wire.IS_READY:
                self._is_ready(frame[1])
            elif kind == wire.FINALIZE:
                self._finalize()
                # Nothing is left to clean up (the kernel frees the shared memory), and tearing the
                # interpreter down would make unloading wait for it.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)

    def _run(self, value: Any) -> Any:
        """The value, awaited first when model code returned an awaitable (async def methods)."""
        if type(value) is list or not hasattr(value, "__await__"):
            return value
        if self._loop is None:
            import asyncio  # only for async models: importing it costs a worker's start a tenth

            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop.run_until_complete(value)

    def _initialize(self, model_file: str, args: dict, arena_size: int, busy_wait_us: int) -> None:
        self._instance_name = args.get("model_instance_name", "")
        self._busy_wait_s = busy_wait_us / 1e6
        pb_utils._configure(self._log, os.path.dirname(os.path.abspath(model_file)), self._channel)
        try:
            config = json.loads(args.get("model_config") or "{}")
            self._decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
            module = load_module(model_file)
            self._model = module.TritonPythonModel()
            if hasattr(self._model, "initialize"):
                self._run(self._model.initialize(args))
        except BaseException as exc:
            self._model = None  # as in Triton, a model whose initialize failed is never finalized
            self.send((wire.ERROR, describe(exc)))
            return
        self._arena_size = arena_size
        self._outputs = [wire.TensorWriter(arena_size) for _ in range(wire.PIPELINE_DEPTH)]
        self._channel.nested = self._execute  # executions that run while model code waits on the server
        self.send((wire.READY, hasattr(self._model, "is_ready")))

    def _auto_complete(self, model_file: str, config_json: str) -> None:
        pb_utils._configure(self._log, os.path.dirname(os.path.abspath(model_file)))
        try:
            model_class = load_module(model_file).TritonPythonModel
            config = pb_utils.ModelConfig(config_json)
            hook = getattr(model_class, "auto_complete_config", None)
            if hook is not None:
                config = hook(config)
                if not isinstance(config, pb_utils.ModelConfig):
                    raise TypeError(
                        f"auto_complete_config must return the ModelConfig it was given, returned "
                        f"{type(config).__name__}"
                    )
            self.send((wire.CONFIG, json.dumps(config.as_dict())))
        except BaseException as exc:
            self.send((wire.ERROR, describe(exc)))

    def _is_ready(self, seq: int) -> None:
        try:
            ready = self._run(self._model.is_ready())
            self.send((wire.READY_STATE, seq, bool(ready), ""))
        except BaseException as exc:
            self.send((wire.READY_STATE, seq, False, describe(exc)))

    def _finalize(self) -> None:
        message = ""
        if self._model is not None and hasattr(self._model, "finalize"):
            try:
                self._run(self._model.finalize())
            except BaseException as exc:
                message = describe(exc)
        self.send((wire.FINALIZED, message))

    def _failed(self, seq: int, message: str) -> None:
        self.send(
            (
                wire.FAILED,
                seq,
                f"Failed to process the request(s) for model '{self._instance_name}', message: {message}",
            )
        )

    def _execute(self, frame: tuple) -> None:
        _, seq, slot, new_size, raw_requests, self._poll_after = frame
        while len(self._inputs) <= slot:
            self._inputs.append(None)
        if new_size:
            old = self._inputs[slot]
            if old is not None:
                old.close()
            self._inputs[slot] = wire.Arena(self._reader.take_fd(), new_size)
        arena = self._inputs[slot]
        wrap = pb_utils.Tensor._wrap
        requests = []
        wanted = []
        for (
            request_id,
            correlation_id,
            flags,
            parameters,
            timeout,
            names,
            inputs,
            stream,
            traced,
        ) in raw_requests:
            tensors = []
            for name, datatype, shape, offset, nbytes in inputs:
                array = arena.array(datatype, shape, offset, nbytes)  # type: ignore[union-attr]
                if stream:
                    # A decoupled request outlives execute (a thread may read its inputs later), but the slot's
                    # arena takes the next execution's inputs once execute returns: keep a copy of its own.
                    array = array.copy()
                tensors.append(wrap(name, datatype, array))
            requests.append(
                pb_utils.InferenceRequest._received(
                    tensors,
                    request_id,
                    correlation_id,
                    flags,
                    parameters,
                    timeout,
                    names,
                    stream,
                    traced,
                )
            )
            wanted.append(names)
        try:
            responses = self._run(self._model.execute(requests))
        except BaseException as exc:
            self._failed(seq, describe(exc))
            return
        if self._decoupled:
            self._executed(seq, slot, responses, len(requests))
            return
        if responses is None:  # it may have sent them instead
            responses = pb_utils.sent_responses(requests)
        problem = _check_responses(responses, len(requests))
        if problem:
            self._failed(seq, problem)
            return
        while len(self._outputs) <= slot:
            self._outputs.append(wire.TensorWriter(self._arena_size))
        writer = self._outputs[slot]
        results: list[tuple[Any, ...]] = []
        try:
            for index, response in enumerate(responses):
                error = response._error
                if error is not None:
                    results.append((False, status_name(error.code()), str(error.message())))
                    continue
                names = wanted[index]
                outputs = tuple(
                    writer.add(t._name, t._datatype, t._array) for t in response._tensors if t._name in names
                )
                results.append((True, outputs, response._parameters))
            new_size = writer.finish()
        except BaseException as exc:
            writer.reset()
            self._failed(seq, describe(exc))
            return
        self.send((wire.RESULT, seq, slot, new_size, tuple(results)), writer.arena.fd if new_size else -1)

    def _executed(self, seq: int, slot: int, returned: Any, count: int) -> None:
        """A decoupled model's execute returned: its responses travel in RESPONSE frames."""
        if returned is not None:
            self._failed(
                seq,
                "Python model is using the decoupled mode and the execute function must return None, "
                f"returned {type(returned).__name__}",
            )
            return
        self.send((wire.RESULT, seq, slot, 0, tuple((True, (), "{}") for _ in range(count))))


def _check_responses(responses: Any, count: int) -> str:
    if responses is None:
        return (
            "execute returned None; without a decoupled transaction policy it must return one "
            "InferenceResponse per request"
        )
    if not isinstance(responses, (list, tuple)):
        return f"execute must return a list of InferenceResponse, not {type(responses).__name__}"
    if len(responses) != count:
        return (
            f"execute returned {len(responses)} InferenceResponse objects for {count} InferenceRequest "
            "objects; it must return one per request"
        )
    for response in responses:
        if not isinstance(response, pb_utils.InferenceResponse):
            return f"execute must return InferenceResponse objects, found {type(response)!r}"
        for tensor in response._tensors:
            if not isinstance(tensor, pb_utils.Tensor):
                return f"output_tensors must hold pb_utils.Tensor objects, found {type(tensor)!r}"
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--fd":
        print("usage: worker --fd FD (started by the Nereid server)", file=sys.stderr)
        return 2
    # Ctrl-C in a terminal reaches the whole process group: the server decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()  # a crash in native code still leaves a traceback in the server's log
    sys.modules["triton_python_backend_utils"] = pb_utils
    sock = socket.socket(fileno=int(argv[1]))
    sys.argv = [""]  # as in Triton's stub: model code that parses arguments (unittest.main) sees none
    sock.setblocking(True)
    try:
        return Worker(sock).serve()
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the server went away
