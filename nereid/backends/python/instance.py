"""One instance of a Python model: a worker process driven from the server's event loop.

The event loop writes a request's inputs into shared memory, sends one small frame, and goes back to its
other work; the worker's answer wakes a reader callback that hands the results to the scheduler. No
thread sits between the two, and the loop never waits on model code. Up to wire.PIPELINE_DEPTH
executions are in flight at once, so that a busy worker finds its next one waiting (see wire.py).

Faults: a thread per worker waits for the process to exit. When it exits unexpectedly (crash, signal,
os._exit, or killed by the server because an execution outlived the execute timeout), the executions in
flight fail at once, the instance reports why it cannot serve, and a new worker starts. Requests
submitted meanwhile wait for it; when it cannot start either, they fail and the instance stays down.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nereid.backends.base import BackendRequest, ExecutionDone, InstanceSpec
from nereid.backends.python.bls import serve_bls, serve_control
from nereid.backends.python.messages import (
    decode_inline_result,
    decode_result,
    encode_request,
    instance_args,
    metric_answer,
)
from nereid.backends.python.outbox import Outbox, send
from nereid.backends.python.process import WorkerLaunch, WorkerProcess, exit_description, start_worker
from nereid.backends.python.worker import wire
from nereid.backends.responses import ResponseStream
from nereid.errors import (
    InternalError,
    NereidError,
    Unavailable,
)

if TYPE_CHECKING:
    from nereid.tracing.trace import RequestTrace

log = logging.getLogger("nereid.backends.python")


IS_READY_TIMEOUT_S = 5.0  # as Triton bounds a model's is_ready
LOOP_BUSY_WAIT_LIMIT_US = 250
_SMOOTHING = 0.2


@dataclass(slots=True)
class _Execution:
    seq: int
    done: ExecutionDone
    loop: asyncio.AbstractEventLoop
    worker: WorkerProcess
    requests: Sequence[BackendRequest]  # to send again when a worker dies before it began them
    slot: int = 0
    timer: asyncio.TimerHandle | None = None
    sent: float = 0.0
    awake_until: float = 0.0
    oldest_since: float = 0.0  # time.monotonic() when it became the oldest in flight (the one running)


@dataclass(frozen=True, slots=True)
class _Held:
    """A submission that arrived while the worker was restarting."""

    requests: Sequence[BackendRequest]
    done: ExecutionDone
    loop: asyncio.AbstractEventLoop


class PythonInstance:
    """AsyncModelInstance for a model.py; see the module docstring for the life of its worker."""

    pipeline_depth = wire.PIPELINE_DEPTH

    def __init__(
        self, spec: InstanceSpec, launch: WorkerLaunch, config_json: str, spare: WorkerProcess | None = None
    ) -> None:
        self._name = spec.instance_name
        self._label = f"model '{spec.model_name}' instance '{spec.instance_name}'"
        self._launch = launch
        self._server = spec.server  # what the model's BLS requests and model control go to
        args = instance_args(spec, config_json)
        self._init = (wire.INIT, str(spec.model_file), args, launch.arena_size, launch.busy_wait_us)
        # The loop waits for a lone execution less long than a worker for its next request: an execution of
        # a small model is quick, and a loop turning in vain takes CPU from the rest of the server.
        self._busy_wait_s = min(launch.busy_wait_us, LOOP_BUSY_WAIT_LIMIT_US) / 1e6
        self._round_trip_s = 0.0  # smoothed time from sending an execution to its answer
        # Taken by whatever changes the state below; on the event loop it is never contended for long.
        self._lock = threading.RLock()
        self._checks = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that submitted last
        self._inflight: collections.deque[_Execution] = collections.deque()  # oldest first
        self._held: list[_Held] = []
        self._ready_checks: dict[int, asyncio.Future[bool]] = {}
        self._streams: dict[int, ResponseStream] = {}  # a decoupled model's open requests, by stream id
        self._stream_ids = itertools.count(1)
        self._calls: set[asyncio.Task[None]] = set()  # BLS and model control calls being served
        # traced decoupled requests sent to the worker, by trace id, while they live (their BLS calls'
        # parents); other requests' traces are found among the executions in flight (`_parent_trace`)
        self._traces: weakref.WeakValueDictionary[int, RequestTrace] = weakref.WeakValueDictionary()
        self._reason: str | None = None
        self._failed = False  # the worker died and could not be restarted
        self._closed = False
        # The custom metric handles the worker holds: released when it exits (with its families)
        self._custom_metrics = spec.custom_metrics
        self._metrics = spec.custom_metrics.scope() if spec.custom_metrics is not None else None
        try:
            self._worker: WorkerProcess | None = self._start(spare)
        except BaseException:
            if self._metrics is not None:
                self._metrics.close()  # what a failed initialize made goes with it
            raise

    # AsyncModelInstance
    def submit(self, requests: Sequence[BackendRequest], done: ExecutionDone) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            self._loop = loop
            worker = self._worker
            if worker is not None:
                self._send(worker, requests, done, loop)
            elif self._closed or self._failed:
                done(Unavailable(self._reason or f"{self._label} is unloaded"))
            else:  # restarting: sent as soon as the new worker is up
                self._held.append(_Held(requests, done, loop))

    async def model_ready(self) -> bool:
        loop = asyncio.get_running_loop()
        with self._lock:
            worker = self._worker
            if worker is None:
                return False
            if not worker.has_is_ready:
                return True
            self._bind(worker, loop)
            seq = next(self._checks)
            future: asyncio.Future[bool] = loop.create_future()
            self._ready_checks[seq] = future
            self._write(worker, wire.encode((wire.IS_READY, seq)))
        try:
            return await asyncio.wait_for(future, IS_READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("%s: is_ready did not answer within %.0f s", self._label, IS_READY_TIMEOUT_S)
            return False
        finally:
            self._ready_checks.pop(seq, None)

    def unavailable_reason(self) -> str | None:
        if self._reason is not None:
            return self._reason
        stuck_after = self._launch.stuck_after_s
        if stuck_after > 0:
            try:
                running = time.monotonic() - self._inflight[0].oldest_since
            except IndexError:  # nothing in flight (or it just finished, seen from another thread)
                return None
            if running > stuck_after:
                return (
                    f"{self._label}: an execution has run for {running:.1f} s, longer than "
                    f"stuck-execution-seconds ({stuck_after:g} s)"
                )
        return None

    def close(self) -> None:
        """End the worker (finalize, then exit) and fail whatever still waits on it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._reason = f"{self._label} is unloaded"
            worker, self._worker = self._worker, None
        if worker is not None:
            self._unbind(worker)
            worker.stop(self._launch.stub_timeout_s)
        if self._metrics is not None:
            self._metrics.close()
        self._post(self._fail_waiting, Unavailable(f"{self._label} was unloaded before answering"))

    # sending
    def _send(
        self,
        worker: WorkerProcess,
        requests: Sequence[BackendRequest],
        done: ExecutionDone,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if worker.loop is not loop:
            self._bind(worker, loop)
        seq = worker.executions
        slot = self._free_slot()
        if slot == len(worker.inputs):
            worker.inputs.append(wire.TensorWriter(self._launch.arena_size))
        writer = worker.inputs[slot]
        try:
            raw = tuple([encode_request(writer, r, self._open_stream(r)) for r in requests])
            for r in requests:  # a decoupled request's BLS calls may outlive its execution: its trace is kept
                if r.trace is not None and r.stream is not None:
                    self._traces[r.trace.id] = r.trace
        except NereidError as exc:
            writer.reset()
            done(exc)
            return
        worker.executions = seq + 1
        new_size = writer.finish()
        execution = _Execution(seq, done, loop, worker, requests, slot)
        alone = not self._inflight
        if alone:
            self._start_timer(execution)
        self._inflight.append(execution)
        # `alone` tells the worker whether to poll once it is done. With another execution ahead, the
        # server keeps it fed and is busy itself: the next request comes when the server gets to it, and
        # a worker polling meanwhile takes a CPU from the server and the clients (at 16 requests in flight
        # over HTTP on two CPUs, 15% of the throughput and 60 us of CPU per request).
        self._write(
            worker,
            wire.encode((wire.EXECUTE, seq, slot, new_size, raw, alone)),
            writer.arena.fd if new_size else -1,
        )
        execution.sent = time.perf_counter()
        if alone and self._round_trip_s < 2 * self._busy_wait_s:
            # Keep the loop turning (it still serves everything else) so that it is awake when the answer
            # comes: waking a sleeping loop costs more than a short execution. Only for models whose
            # answers have been coming soon enough for it to pay.
            execution.awake_until = execution.sent + self._busy_wait_s
            loop.call_soon(self._keep_awake, execution)

    def _free_slot(self) -> int:
        """The lowest slot that no execution in flight holds."""
        inflight = self._inflight
        if not inflight:
            return 0
        if len(inflight) == 1:
            return 1 if inflight[0].slot == 0 else 0
        held = {execution.slot for execution in inflight}
        return next(slot for slot in itertools.count() if slot not in held)

    def _open_stream(self, request: BackendRequest) -> int:
        """The id under which the worker sends a decoupled request's responses (0: not decoupled)."""
        stream = request.stream
        if stream is None:
            return 0
        stream_id = next(self._stream_ids)
        self._streams[stream_id] = stream
        stream.on_cancel(lambda: self._cancel_stream(stream_id))
        return stream_id

    def _cancel_stream(self, stream_id: int) -> None:
        worker = self._worker
        if worker is not None and stream_id in self._streams:
            self._write(worker, wire.encode((wire.CANCEL, stream_id)))

    def _keep_awake(self, execution: _Execution) -> None:
        if self._inflight and self._inflight[0] is execution and time.perf_counter() < execution.awake_until:
            os.sched_yield()  # a process that wants this CPU (the worker, say) has it first
            execution.loop.call_soon(self._keep_awake, execution)

    def _start_timer(self, execution: _Execution) -> None:
        """Time an execution from when the worker can start it: when the ones before it are done."""
        execution.oldest_since = time.monotonic()
        timeout = self._launch.execute_timeout_s
        if timeout > 0:
            execution.timer = execution.loop.call_later(
                timeout, self._timed_out, execution.worker, execution.seq
            )

    def _write(self, worker: WorkerProcess, frame: bytes, fd: int = -1) -> None:
        """Send without blocking the loop: what the socket cannot take now waits in the worker's outbox
        (BLS answers carry their tensors inline, so a frame may be megabytes)."""
        loop = worker.loop
        if loop is None or loop.is_closed() or not _on_loop_thread(loop):
            if worker.outbox and loop is not None and loop.is_running():  # behind what waits there
                _call_on(loop, self._write, worker, frame, fd)
            else:  # another thread (a batcher's) may wait for the worker: the loop goes on meanwhile
                self._write_blocking(worker, frame, fd)
            return
        if worker.outbox is None:
            worker.outbox = Outbox(worker.sock, self._launch.stub_timeout_s, lambda: _stopped_reading(worker))
        try:
            worker.outbox.write(frame, fd, loop)
        except OSError:  # the worker is gone; its exit fails the executions
            worker.outbox.clear()

    def _write_blocking(self, worker: WorkerProcess, frame: bytes, fd: int) -> None:
        """Off the loop: wait a while for a worker that does not read."""
        try:
            sent = send(worker.sock, frame, fd)
            if sent < len(frame):
                worker.sock.settimeout(self._launch.stub_timeout_s)
                worker.sock.sendall(frame[sent:])
        except OSError:
            _stopped_reading(worker)
        finally:
            worker.sock.setblocking(False)

    # receiving, on the event loop
    def _bind(self, worker: WorkerProcess, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the worker's socket from this loop (tests run several loops one after another)."""
        bound = worker.loop
        if bound is loop:
            return
        if bound is not None and not bound.is_closed():
            bound.remove_reader(worker.sock.fileno())
        worker.sock.setblocking(False)
        loop.add_reader(worker.sock.fileno(), self._on_readable, worker)
        worker.loop = loop

    def _unbind(self, worker: WorkerProcess) -> None:
        loop = worker.loop
        if loop is None or loop.is_closed():
            return
        fd = worker.sock.fileno()
        if fd < 0:
            return
        if not loop.is_running() or _on_loop_thread(loop):
            _stop_watching(worker, loop, fd)
            return
        removed = threading.Event()

        def remove() -> None:
            _stop_watching(worker, loop, fd)
            removed.set()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(remove)
            removed.wait(self._launch.stub_timeout_s)

    def _on_readable(self, worker: WorkerProcess) -> None:
        try:
            frames = wire.receive(worker.sock, worker.reader)
        except BlockingIOError:
            return
        except OSError:
            frames = None
        if frames is None:
            # The exit watcher reports the death with its cause; stop listening meanwhile. A worker that
            # closed its end but lives on is of no use: end it, so that the watcher fires.
            self._unbind(worker)
            if worker.loop is not None:
                worker.loop.call_later(self._launch.stub_timeout_s, _end, worker)
            return
        with self._lock:
            for frame in frames:
                self._handle(worker, frame)

    def _handle(self, worker: WorkerProcess, frame: tuple[Any, ...]) -> None:
        kind = frame[0]
        if kind == wire.RESULT:
            _, seq, slot, new_size, results = frame
            if new_size:
                while len(worker.outputs) <= slot:
                    worker.outputs.append(None)
                _replace(worker.outputs, slot, wire.Arena(worker.reader.take_fd(), new_size))
            execution = self._finish(seq)
            if execution is not None:
                arena = worker.outputs[slot] if slot < len(worker.outputs) else None
                execution.done([decode_result(arena, result) for result in results])
        elif kind == wire.FAILED:
            _, seq, message = frame
            log.error("%s", message)  # with the model's traceback, as Triton logs it
            execution = self._finish(seq)
            if execution is not None:
                execution.done(InternalError(message))
        elif kind == wire.RESPONSE:
            _, stream_id, final, result = frame
            stream = self._streams.pop(stream_id) if final else self._streams.get(stream_id)
            if stream is not None:
                stream.put(decode_inline_result(result), final)
        elif kind == wire.BLS or kind == wire.CONTROL:
            loop = worker.loop or asyncio.get_running_loop()
            reply = functools.partial(self._answer, worker)
            if kind == wire.BLS:
                task = loop.create_task(serve_bls(self._server, frame, reply, self._parent_trace))
            else:
                task = loop.create_task(serve_control(self._server, frame, reply))
            self._calls.add(task)
            task.add_done_callback(self._call_done)
            # While the model waits for the server, the worker can run another execution (see
            # worker/channel.py), so it may take one more: one the call itself may need, when the model
            # calls itself through other models.
            self.pipeline_depth += 1
        elif kind == wire.LOG:
            worker.log_frame(frame)
        elif kind == wire.METRIC:
            answer = self._metric(frame)
            if answer is not None:
                self._write(worker, wire.encode(answer))
        elif kind == wire.READY_STATE:
            _, seq, ready, message = frame
            if message:
                log.error("%s: is_ready raised: %s", self._label, message)
            check = self._ready_checks.get(seq)
            if check is not None and not check.done():
                check.set_result(ready)

    def _metric(self, frame: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return metric_answer(self._metrics, frame)

    def _parent_trace(self, trace_id: int) -> RequestTrace | None:
        """The trace of a request sent to the worker, by id: the parent of a BLS call made with it. Looked
        for only when such a call comes, so that tracing a request costs no bookkeeping here."""
        trace = self._traces.get(trace_id)
        if trace is not None:
            return trace
        for execution in self._inflight:
            for request in execution.requests:
                if request.trace is not None and request.trace.id == trace_id:
                    return request.trace
        return None

    def _call_done(self, task: asyncio.Task[None]) -> None:
        self._calls.discard(task)
        self.pipeline_depth -= 1

    def _answer(self, worker: WorkerProcess, frame: tuple[Any, ...]) -> None:
        if worker is self._worker:  # a restarted worker has no caller waiting
            self._write(worker, wire.encode(frame))

    def _finish(self, seq: int) -> _Execution | None:
        """The execution answered now: the oldest in flight, except when a worker waiting in a BLS call
        ran a later one meanwhile."""
        inflight = self._inflight
        if not inflight:
            return None
        if inflight[0].seq != seq:
            for execution in inflight:
                if execution.seq == seq:
                    inflight.remove(execution)
                    return execution  # not the oldest: it has no timer
            return None
        execution = inflight.popleft()
        if not inflight:  # the last one in flight ran alone, or after one that is done
            self._round_trip_s += _SMOOTHING * (time.perf_counter() - execution.sent - self._round_trip_s)
        if execution.timer is not None:
            execution.timer.cancel()
            if inflight:
                self._start_timer(inflight[0])
        return execution

    # faults
    def _timed_out(self, worker: WorkerProcess, seq: int) -> None:
        inflight = self._inflight
        if not inflight or inflight[0].seq != seq or inflight[0].worker is not worker:
            return
        worker.kill_reason = (
            f"did not finish an execution within the execute timeout ({self._launch.execute_timeout_s:g} s)"
        )
        worker.timed_out = True
        log.error("%s: %s; killing its worker (pid %d)", self._label, worker.kill_reason, worker.process.pid)
        worker.kill()

    def _start(self, spare: WorkerProcess | None = None) -> WorkerProcess:
        worker, _ = start_worker(
            self._launch, self._label, self._init, Unavailable, spare=spare, on_metric=self._metric
        )
        threading.Thread(
            target=self._watch, args=(worker,), name=f"{self._name}-worker-watch", daemon=True
        ).start()
        return worker

    def _watch(self, worker: WorkerProcess) -> None:
        code = worker.process.wait()
        self._post(self._lost, worker, worker.kill_reason or exit_description(code))

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        """Run a state change on the event loop that serves the instance, or here when none runs."""
        loop = self._loop
        if loop is not None and loop.is_running():
            try:
                loop.call_soon_threadsafe(callback, *args)
                return
            except RuntimeError:  # closed meanwhile
                pass
        callback(*args)

    def _lost(self, worker: WorkerProcess, cause: str) -> None:
        with self._lock:
            if worker is not self._worker or self._closed:
                return  # an old worker, or one stopped on purpose
            self._worker = None
            self._reason = f"{self._label}: its worker process {cause}; restarting it"
            log.error("%s: worker process %d %s; restarting it", self._label, worker.process.pid, cause)
            self._unbind(worker)
            worker.close_channel()
            if self._metrics is not None and self._custom_metrics is not None:
                # its families died with it; the new worker's initialize makes its own
                self._metrics.close()
                self._metrics = self._custom_metrics.scope()
            # Killed for the execute timeout, the worker was still on its oldest execution: those queued
            # behind it never began, and run on the new worker instead of failing with it (decoupled streams aside).
            queued: list[_Execution] = []
            if worker.timed_out and len(self._inflight) > 1 and not self._streams:
                queued = list(itertools.islice(self._inflight, 1, None))
                self._inflight = collections.deque([self._inflight[0]])
            self._fail_waiting(
                InternalError(f"Stub process '{self._name}' is not healthy: its worker process {cause}"),
                keep_held=True,
            )
            self._held[:0] = [_Held(e.requests, e.done, e.loop) for e in queued]
        threading.Thread(target=self._restart, name=f"{self._name}-restart", daemon=True).start()

    def _restart(self) -> None:
        try:
            worker: WorkerProcess | NereidError = self._start()
        except NereidError as exc:
            worker = exc
        self._post(self._restarted, worker)

    def _restarted(self, worker: WorkerProcess | NereidError) -> None:
        with self._lock:
            if isinstance(worker, WorkerProcess) and self._closed:
                worker.stop(self._launch.stub_timeout_s)
                return
            if isinstance(worker, NereidError):
                self._failed = True
                self._reason = (
                    f"{self._label}: its worker process died and could not be restarted: {worker.message}"
                )
                log.error("%s", self._reason)
                self._fail_waiting(Unavailable(self._reason))
                return
            self._worker = worker
            self._reason = None
            log.info("%s: worker restarted (pid %d)", self._label, worker.process.pid)
            held, self._held = self._held, []
            for submission in held:
                self._send(worker, submission.requests, submission.done, submission.loop)

    def _fail_waiting(self, error: NereidError, keep_held: bool = False) -> None:
        inflight, self._inflight = self._inflight, collections.deque()
        waiting = [(execution.done, execution.loop) for execution in inflight]
        for execution in inflight:
            if execution.timer is not None:
                execution.timer.cancel()
        if not keep_held:
            waiting.extend((held.done, held.loop) for held in self._held)
            self._held = []
        for done, loop in waiting:
            _call_on(loop, done, error)
        for check in self._ready_checks.values():
            _call_on(check.get_loop(), _not_ready, check)
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            _call_on(stream.loop, stream.put, error, True)


def _not_ready(check: asyncio.Future[bool]) -> None:
    if not check.done():
        check.set_result(False)


def _replace(arenas: list[wire.Arena | None], slot: int, arena: wire.Arena) -> None:
    old = arenas[slot]
    if old is not None:
        old.close()
    arenas[slot] = arena


def _end(worker: WorkerProcess) -> None:
    if worker.process.poll() is None:
        worker.kill_reason = "closed its connection to the server"
        worker.kill()


def _stop_watching(worker: WorkerProcess, loop: asyncio.AbstractEventLoop, fd: int) -> None:
    loop.remove_reader(fd)
    if worker.outbox is not None:  # what was still to be sent goes nowhere
        worker.outbox.clear()


def _stopped_reading(worker: WorkerProcess) -> None:
    if worker.process.poll() is None:
        worker.kill_reason = "stopped reading its requests"
        worker.kill()


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _call_on(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Call on the loop's thread: now when already there or when the loop is not running, else soon."""
    if _on_loop_thread(loop) or not loop.is_running():
        callback(*args)
        return
    with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody waits any more
        loop.call_soon_threadsafe(callback, *args)
