"""Wires settings, repository, engine and frontends together; start, serve, stop."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any
from warnings import filterwarnings

import grpc

from nereid import TRITON_PROTOCOL_VERSION, __version__, heap, host
from nereid.backends.python.process import kill_all_workers
from nereid.cache import probe_cache
from nereid.core.engine import Engine
from nereid.errors import NereidError, Unavailable
from nereid.exit_countdown import ExitCountdown
from nereid.frontends.grpc import start_grpc_server
from nereid.frontends.grpc.inflight import InferCalls, report_while_draining
from nereid.frontends.http import HttpFrontend, HttpServer, error_response
from nereid.frontends.http.listener import default_max_connections
from nereid.frontends.http.protocol import ConnectionLimits
from nereid.frontends.metrics import MetricsExporter, handle_metrics
from nereid.frontends.openai import OpenAIFrontend, openai_error_response
from nereid.gpu_metrics import GpuSampler
from nereid.log_settings import ServerLog
from nereid.repository import ModelManager
from nereid.repository.manager import RepositoryMissing
from nereid.settings import ServerSettings

log = logging.getLogger("nereid")


def build_engine(settings: ServerSettings, server_log: ServerLog | None = None) -> Engine:
    if settings.response_cache is not None:
        probe_cache(settings.response_cache)  # a Redis that does not answer stops the start, as in Triton
    models = ModelManager(settings)
    engine = Engine(settings, models, server_log)
    try:
        models.start(engine)  # model code (ensemble steps, BLS) calls back into the engine
    except RepositoryMissing as exc:
        if settings.exit_on_error:
            raise
        # As Triton: the server failed to initialize, yet with --exit-on-error=false it keeps its endpoints
        # up (metadata answers; live and ready say false) and loads nothing.
        log.error("failed to initialize: %s", exc.message)
        return _UninitializedEngine(settings, models, server_log)
    return engine


class _UninitializedEngine(Engine):
    """An engine whose server failed to initialize: neither live nor ready."""

    def is_live(self) -> bool:
        return False

    def is_ready(self) -> bool:
        return False


def model_table(engine: Engine) -> str:
    rows = engine.models.model_table()
    header = ("Model", "Version", "Status")
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(3)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(row: tuple[str, str, str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + " |"

    return "\n".join([line, fmt(header), line, *(fmt(r) for r in rows), line])


def serve(settings: ServerSettings, warnings: list[str] | None = None) -> int:
    server_log = ServerLog(settings.log, settings.log_escape)
    try:
        server_log.install()  # in Triton's line format; --log-verbose concerns Nereid, not its libraries
    except NereidError as exc:
        print(f"nereid: {exc.message}", file=sys.stderr)
        return 1
    # A JSON number past FP32's or FP16's range becomes infinity, as in Triton; numpy's cast says so with a
    # warning, which has no place in the server's log for a client's input.
    filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning, r"nereid\.frontends\.")
    log.info("Nereid %s (Triton protocol %s) starting", __version__, TRITON_PROTOCOL_VERSION)
    for warning in warnings or []:
        log.warning(warning)
    if settings.batch_scheduling:  # before the models' threads and worker processes start: they inherit it
        problem = host.batch_scheduling()
        if problem is not None:
            log.warning("--cpu-scheduling=batch: left as it was (%s)", problem)
    try:
        engine = build_engine(settings, server_log)
    except NereidError as exc:
        log.error("%s", exc.message)
        return 1
    log.info("", extra={"triton_object": model_table(engine)})  # a multi-line entry, as Triton's table
    shutdown = _Shutdown()
    code = 1
    try:
        if settings.exit_on_error and not engine.models.all_ready():
            log.error(
                "exiting: not every model loaded (start with --exit-on-error=false to serve the others)"
            )
            return 1
        if not settings.allow_http and not settings.allow_grpc:
            log.error("exiting: --allow-http=false and --allow-grpc=false leave no endpoint to serve")
            return 1
        heap.settle()  # the models that start with the server are loaded
        code = _run(_serve(engine, settings, shutdown))
        return code
    finally:
        heap.thaw()
        _stop_engine(engine, shutdown.deadline, code)
        log.info("Nereid stopped")


class _Shutdown:
    """When the server must be gone by: set at the first SIGINT or SIGTERM."""

    deadline: float | None = None


def _exit_now(signum: int, _frame: object = None) -> None:
    """A second SIGINT or SIGTERM: no more waiting for anything."""
    log.warning("%s again: exiting at once", signal.Signals(signum).name)
    kill_all_workers()
    logging.shutdown()
    os._exit(128 + signum)


def _stop_engine(engine: Engine, deadline: float | None, code: int) -> None:
    """Unload every model, within the --exit-timeout-secs that began at the signal. Models still busy
    then (a hung Python model) have their worker processes killed, and if even that does not let the
    unloading finish, the process exits without it."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_now)
    stopper = threading.Thread(target=engine.shutdown, name="nereid-shutdown", daemon=True)
    stopper.start()
    stopper.join(None if deadline is None else max(deadline - time.monotonic(), 0.5))
    if not stopper.is_alive():
        return
    killed = kill_all_workers()
    log.error("models did not stop within --exit-timeout-secs; killed %d Python worker process(es)", killed)
    stopper.join(1.0)
    if stopper.is_alive():
        log.error("exiting without waiting further for models to stop")
        logging.shutdown()
        os._exit(code)


def _run(main: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop does not exist on every platform; asyncio's own loop works too
        return asyncio.run(main)
    return uvloop.run(main)


def http_limits(settings: ServerSettings) -> ConnectionLimits:
    """The inference endpoint's bounds on its connections, from the --http-* flags."""
    return ConnectionLimits(
        header_timeout_s=settings.http_header_timeout_s,
        body_timeout_s=settings.http_body_timeout_s,
        body_min_rate=settings.http_body_min_rate,
        max_connections=settings.http_max_connections or default_max_connections(),
    )


async def _serve(engine: Engine, settings: ServerSettings, shutdown: _Shutdown) -> int:
    """HTTP, gRPC and metrics on one event loop until SIGINT or SIGTERM, then requests in flight get
    --exit-timeout-secs to finish."""
    http: HttpServer | None = None
    grpc_server: grpc.aio.Server | None = None
    metrics: HttpServer | None = None
    sampler: asyncio.Task[None] | None = None
    frontend: HttpFrontend | None = None
    openai: HttpServer | None = None  # the OpenAI API on a port of its own
    calls = InferCalls()
    try:
        if settings.allow_grpc:
            grpc_server, port = await start_grpc_server(engine, settings, calls)
            log.info("Started GRPCInferenceService at %s:%d", settings.grpc_address, port)
        if settings.allow_openai and settings.openai_port is not None:
            # before the HTTP port, whose readiness clients wait on; the same limits as the HTTP port's (the
            # same server), with OpenAI's error shape
            openai = HttpServer(
                OpenAIFrontend(engine, settings).handle,
                openai_error_response,
                settings.http_max_input_size,
                tracing=engine.tracer,
                limits=http_limits(settings),
            )
            try:
                await openai.start(settings.http_address, settings.openai_port)
            except OSError as exc:
                openai = None
                raise _cannot_serve("OpenAI", settings.http_address, settings.openai_port, exc) from None
            log.info("Started OpenAI API at %s:%d", settings.http_address, openai.port)
        if settings.allow_http:
            frontend = HttpFrontend(engine, settings)
            if settings.allow_openai and settings.openai_port is None:  # the OpenAI API on the HTTP port
                frontend.routes.mount(OpenAIFrontend(engine, settings).routes())
            http = HttpServer(
                frontend.dispatch,
                error_response,
                settings.http_max_input_size,
                tracing=engine.tracer,
                limits=http_limits(settings),
            )
            try:
                await http.start(settings.http_address, settings.http_port, settings.reuse_http_port)
            except OSError as exc:  # the address is taken or cannot be bound
                http = None
                raise _cannot_serve("HTTP", settings.http_address, settings.http_port, exc) from None
            log.info("Started HTTPService at %s:%d", settings.http_address, http.port)
        if settings.allow_metrics:
            exporter = MetricsExporter(
                engine,
                settings.allow_cpu_metrics,
                settings.metrics_config,
                engine.models.custom_metrics,
                GpuSampler.open() if settings.allow_gpu_metrics else None,
            )
            metrics = HttpServer(partial(handle_metrics, exporter), error_response, 64 * 1024)
            try:
                await metrics.start(settings.metrics_address, settings.metrics_port)
            except OSError as exc:
                metrics = None
                raise _cannot_serve("Metrics", settings.metrics_address, settings.metrics_port, exc) from None
            sampler = asyncio.create_task(exporter.sample_forever(settings.metrics_interval_ms / 1000))
            log.info("Started Metrics Service at %s:%d", settings.metrics_address, metrics.port)
    except NereidError as exc:
        log.error("exiting: %s", exc.message)
        await _stop(http, grpc_server, metrics, ExitCountdown(0), calls, openai)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    countdown = ExitCountdown(settings.exit_timeout_secs)
    shutdown.deadline = countdown.deadline
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _exit_now, signum)
    log.info("stopping: requests in flight get up to %d s to finish", settings.exit_timeout_secs)
    for model in engine.models.loaded():
        model.scheduler.refuse_new_sequences()
    log_inflight(engine)
    if sampler is not None:
        sampler.cancel()
    await _stop(http, grpc_server, metrics, countdown, calls, openai)
    if frontend is not None:
        frontend.close()
    log.info("Waiting for in-flight requests to complete.")  # Triton's words, which tools look for
    await drain_models(engine, countdown)
    return 0


def log_inflight(engine: Engine) -> int:
    """What the drain waits for, model by model, in Triton's words (tools watch for them); how many model
    versions still have some."""
    busy = 0
    for model in engine.models.loaded():
        outstanding = model.outstanding()
        if outstanding > 0:
            busy += 1
            log.info(
                "Model '%s' (version %d) has %d in-flight inferences", model.name, model.version, outstanding
            )
    return busy


async def drain_models(
    engine: Engine, countdown: ExitCountdown, poll_s: float = 0.05, report_s: float = 1.0
) -> None:
    """Once the endpoints are closed: wait until no model has work in flight (a sequence started before the
    signal may still be ended from within the server, by an ensemble or a BLS call, or released when idle),
    or until the countdown is over; say at once, and then every `report_s`, what is left."""
    next_report = time.monotonic()
    first = True
    while True:
        busy = sum(model.outstanding() > 0 for model in engine.models.loaded())
        now = time.monotonic()
        if now >= countdown.deadline:
            return
        if now >= next_report and (busy or first):
            countdown.report(f"Found {busy} model versions that have in-flight inferences")
            log_inflight(engine)
            next_report = now + report_s
        if not busy:
            return
        first = False
        await asyncio.sleep(poll_s)


async def _stop(
    http: HttpServer | None,
    grpc_server: grpc.aio.Server | None,
    metrics: HttpServer | None,
    countdown: ExitCountdown,
    calls: InferCalls,
    openai: HttpServer | None = None,
) -> None:
    """The endpoints one after the other, as Triton stops them: HTTP (its open connections serve until their
    clients leave; the OpenAI port's at the same time), then gRPC (its calls finish), each within what is
    left of the countdown."""
    http_servers = [server for server in (http, openai) if server is not None]
    if http_servers:
        left = max(countdown.deadline - time.monotonic(), 0.0)
        # the countdown is said once, by the first
        await asyncio.gather(
            *(
                server.stop(left, countdown if index == 0 else None)
                for index, server in enumerate(http_servers)
            )
        )
    grace = max(countdown.deadline - time.monotonic(), 0.0)
    reporter = (
        asyncio.create_task(report_while_draining(calls, countdown)) if grpc_server is not None else None
    )
    try:
        await asyncio.gather(
            *([grpc_server.stop(grace)] if grpc_server is not None else []),
            *([metrics.stop(min(grace, 1.0))] if metrics is not None else []),
        )
    finally:
        if reporter is not None:
            reporter.cancel()


def _cannot_serve(service: str, address: str, port: int, exc: OSError) -> Unavailable:
    """Triton's words for a port in use, which tools look for in its log; the reason otherwise."""
    if exc.errno == errno.EADDRINUSE:
        return Unavailable(
            f"failed to start {service} service: Unavailable - Socket '{address}:{port}' already in use"
        )
    return Unavailable(f"failed to start {service} service: cannot serve on {address}:{port}: {exc}")
