"""Wires settings, repository, engine and frontends together; start, serve, stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Coroutine
from functools import partial
from typing import Any

from nereid.engine import Engine
from nereid.errors import NereidError
from nereid.frontends.http import HttpFrontend, HttpServer, error_response
from nereid.metrics import MetricsExporter, handle_metrics
from nereid.repository import ModelManager
from nereid.settings import ServerSettings

log = logging.getLogger("nereid")


def build_engine(settings: ServerSettings) -> Engine:
    models = ModelManager(settings)
    models.start()
    return Engine(settings, models)


def model_table(engine: Engine) -> str:
    rows = engine.models.model_table()
    header = ("Model", "Version", "Status")
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(3)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(row: tuple[str, str, str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + " |"

    return "\n".join([line, fmt(header), line, *(fmt(r) for r in rows), line])


def serve(settings: ServerSettings, warnings: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s] %(message)s",
        stream=sys.stderr,
    )
    for warning in warnings or []:
        log.warning(warning)
    try:
        engine = build_engine(settings)
    except NereidError as exc:
        log.error("%s", exc.message)
        return 1
    print(model_table(engine), flush=True)
    if settings.exit_on_error and not engine.models.all_ready():
        log.error("exiting: not every model loaded (start with --exit-on-error=false to serve the others)")
        engine.shutdown()
        return 1
    if settings.allow_grpc:
        log.warning("gRPC is not supported yet: nothing listens on port %d", settings.grpc_port)
    if not settings.allow_http:
        log.error("exiting: --allow-http=false leaves no endpoint to serve")
        engine.shutdown()
        return 1
    try:
        _run(_serve(engine, settings))
    except OSError as exc:  # an address is taken or cannot be bound
        log.error("exiting: cannot listen: %s", exc)
        return 1
    finally:
        engine.shutdown()
    return 0


def _run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop does not exist on every platform; asyncio's own loop works too
        asyncio.run(main)
    else:
        uvloop.run(main)


async def _serve(engine: Engine, settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, then let requests in flight finish for --exit-timeout-secs."""
    frontend = HttpFrontend(engine, settings)
    http = HttpServer(frontend.handle, error_response, settings.http_max_input_size)
    await http.start(settings.http_address, settings.http_port)
    log.info("Started HTTPService at %s:%d", settings.http_address, http.port)
    metrics: HttpServer | None = None
    sampler: asyncio.Task[None] | None = None
    if settings.allow_metrics:
        exporter = MetricsExporter(engine, settings.allow_cpu_metrics)
        metrics = HttpServer(partial(handle_metrics, exporter), error_response, 64 * 1024)
        await metrics.start(settings.metrics_address, settings.metrics_port)
        sampler = asyncio.create_task(exporter.sample_forever(settings.metrics_interval_ms / 1000))
        log.info("Started Metrics Service at %s:%d", settings.metrics_address, metrics.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("stopping: requests in flight get up to %d s to finish", settings.exit_timeout_secs)
    await http.stop(settings.exit_timeout_secs)
    if sampler is not None:
        sampler.cancel()
    if metrics is not None:
        await metrics.stop(1.0)
