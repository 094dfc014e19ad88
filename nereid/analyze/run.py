"""One `nereid analyze` run: the server, the search with its measurer, progress, and what it writes."""

from __future__ import annotations

import base64
import json
import socket
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from nereid.analyze import output, report, summary
from nereid.analyze.checkpoint import BudgetSpent, Checkpoint, CheckpointedMeasure
from nereid.analyze.cli import AnalyzeSettings
from nereid.analyze.driver import ServerDriver
from nereid.analyze.inputs import InputError, request_inputs
from nereid.analyze.measure import ServerUsage, builtin_measure, perf_analyzer_measure
from nereid.analyze.search import (
    CandidateFailed,
    Goal,
    Measurement,
    Outcome,
    brute,
    quick,
    quick_limit,
    ranked,
)
from nereid.analyze.space import Candidate, Space, backend_kind, build_space

# Where the web console of a server of the output repository finds the latest analysis.
from nereid.frontends.console.analysis import SUMMARY_FILE as CONSOLE_SUMMARY


@dataclass
class _Target:
    """The model a user asked for, and what its search changes."""

    name: str
    config: dict[str, Any]
    searched: tuple[str, ...]  # the model itself, or an ensemble's composing models
    needed: tuple[str, ...]  # every model folder the output needs


def _free_ports() -> tuple[int, int]:
    sockets = [socket.socket() for _ in range(2)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return sockets[0].getsockname()[1], sockets[1].getsockname()[1]
    finally:
        for s in sockets:
            s.close()


def _target(driver: ServerDriver, name: str, known: list[str]) -> _Target:
    if name not in known:
        raise CandidateFailed(
            f"unknown model '{name}': the repository has {', '.join(sorted(known)) or 'no models'}"
        )
    driver.load(name)
    config = driver.config(name)
    if backend_kind(config) != "ensemble":
        return _Target(name, config, (name,), (name,))
    steps = [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]
    members = list(dict.fromkeys(steps))
    searched = tuple(m for m in members if backend_kind(driver.config(m)) != "ensemble")
    return _Target(name, config, searched, (name, *members))


def _fingerprint(settings: AnalyzeSettings, target: _Target, space: Space) -> dict[str, Any]:
    return {
        "model": target.name,
        "space": [[d.model, d.name, list(d.values)] for d in space.dimensions],
        "search": settings.search,
        "goal": [settings.latency_budget_ms, settings.min_throughput],
        "protocol": settings.protocol,
        "concurrencies": list(settings.concurrencies),
        "input_data": settings.input_data,
        "load_generator": "perf_analyzer" if settings.perf_analyzer else "builtin",
        "window": asdict(settings.rules),
    }


# A search stops when its first candidates all fail.
_FAILURES_TO_STOP = 3


def _perf_analyzer_data(settings: AnalyzeSettings, target: _Target, scratch: Path) -> str:
    """perf_analyzer's --input-data: zero, random, or a JSON file (a raw file becomes base64 BYTES)."""
    if settings.input_data in ("zero", "random"):
        return settings.input_data
    try:
        json.loads(Path(settings.input_data).read_bytes())
        return settings.input_data
    except (UnicodeDecodeError, ValueError):
        name = target.config["input"][0]["name"]
        # perf_analyzer's b64 is the tensor's serialized bytes: one element, led by its length
        raw = Path(settings.input_data).read_bytes()
        content = base64.b64encode(struct.pack("<I", len(raw)) + raw).decode()
        path = scratch / "input_data.json"
        path.write_text(json.dumps({"data": [{name: {"b64": content, "shape": [1]}}]}))
        return str(path)


def _measurer(
    settings: AnalyzeSettings,
    driver: ServerDriver,
    target: _Target,
    space: Space,
    checkpoint: Checkpoint,
    deadline: float | None,
    scratch: Path,
) -> CheckpointedMeasure:
    """Candidates loaded through the load API, measured by perf_analyzer or the built-in generator."""
    url = (driver.grpc_url if settings.protocol == "grpc" else driver.http_url) or driver.http_url
    inputs = request_inputs(target.config, settings.input_data, settings.shapes)

    def usage() -> ServerUsage:
        return driver.usage(target.name)

    def load(candidate: Candidate) -> None:
        for model in target.searched:
            driver.load(model, space.override(candidate, model))
        if target.name not in target.searched:
            driver.load(target.name)

    if settings.perf_analyzer:
        binary, data = settings.perf_analyzer, _perf_analyzer_data(settings, target, scratch)

        def measure(concurrency: int) -> Measurement:
            return perf_analyzer_measure(
                binary,
                url,
                settings.protocol,
                target.name,
                data,
                concurrency,
                settings.rules,
                usage,
                scratch,
                deadline,
            )
    else:

        def measure(concurrency: int) -> Measurement:
            return builtin_measure(
                url, settings.protocol, target.name, inputs, concurrency, settings.rules, usage, deadline
            )

    return CheckpointedMeasure(checkpoint, space.key, load, measure, deadline)


def _progress(
    out: TextIO,
    started: float,
    deadline: float | None,
    done: int,
    planned: int,
    space: Space,
    outcome: Outcome,
    best: float | None,
    goal: Goal,
) -> None:
    elapsed = time.monotonic() - started
    left = elapsed / done * max(0, planned - done)
    if deadline is not None:
        left = min(left, max(0.0, deadline - time.monotonic()))
    found = outcome.best(goal) or outcome.closest()
    what = (
        f"skipped: {outcome.failure}"
        if found is None
        else f"{found.throughput:,.0f} infer/s at concurrency {found.concurrency}, p99 {found.p99_ms:.2f} ms"
        + ("" if outcome.best(goal) else " (outside the goal)")
    )
    best_text = f"{best:,.0f} infer/s" if best is not None else "none within the goal"
    print(
        f"[{done}/{planned}] {space.describe(outcome.candidate)}: {what} | best {best_text} | "
        f"{elapsed / 60:.1f} min elapsed, at most {left / 60:.1f} min left",
        file=out,
        flush=True,
    )


def _search(
    settings: AnalyzeSettings, space: Space, measure: CheckpointedMeasure, goal: Goal
) -> Iterator[Outcome]:
    if settings.search == "brute":
        return brute(space, settings.concurrencies, measure, goal)
    return quick(space, settings.concurrencies, measure, goal)


def _analyze_model(
    settings: AnalyzeSettings, driver: ServerDriver, target: _Target, report_dir: Path, out: TextIO
) -> dict[str, Any]:
    space = build_space({m: driver.config(m) for m in target.searched}, target.searched, settings.choices)
    goal = Goal(settings.latency_budget_ms, settings.min_throughput)
    report_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = Checkpoint(report_dir / "checkpoint.json", _fingerprint(settings, target, space))
    if checkpoint.set_aside is not None:
        print(f"nereid analyze: a checkpoint of other settings was moved to {checkpoint.set_aside}", file=out)
    if checkpoint.resumed:
        print(
            f"nereid analyze: resuming from {checkpoint.resumed} measurements kept in the checkpoint",
            file=out,
        )
    started = time.monotonic()
    deadline = started + settings.budget_s if settings.budget_s is not None else None
    measure = _measurer(settings, driver, target, space, checkpoint, deadline, report_dir)
    total = space.size()
    planned = quick_limit(space) if settings.search == "quick" else total
    print(
        f"nereid analyze: {target.name}: {settings.search} search over {total} candidates "
        f"({'at most ' + str(planned) if settings.search == 'quick' else 'all'} measured)",
        file=out,
    )
    outcomes: list[Outcome] = []
    complete, interrupted = False, False
    best: float | None = None
    try:
        for outcome in _search(settings, space, measure, goal):
            outcomes.append(outcome)
            found = outcome.best(goal)
            if found is not None and (best is None or found.throughput > best):
                best = found.throughput
            _progress(out, started, deadline, len(outcomes), planned, space, outcome, best, goal)
            if len(outcomes) == _FAILURES_TO_STOP and all(o.failure for o in outcomes):
                # the models' own config and the first changes to it all failed: the cause is not the
                # settings (inputs the model refuses, a load generator that cannot run), and every
                # candidate after them would fail the same way
                print(
                    f"nereid analyze: stopped: the first {_FAILURES_TO_STOP} candidates all failed, the "
                    f"first with: {outcomes[0].failure}",
                    file=out,
                )
                break
        else:
            complete = True
    except BudgetSpent:
        print(f"nereid analyze: the budget of {settings.budget_s / 60:g} min is spent", file=out)  # type: ignore[operator]
    except KeyboardInterrupt:
        interrupted = True
        print(
            "nereid analyze: interrupted; the checkpoint keeps every measurement, and the next run resumes",
            file=out,
        )
    document, chosen = summary.document(
        space,
        outcomes,
        goal,
        models=[target.name],
        searched_models=list(target.searched),
        search=settings.search,
        protocol=settings.protocol,
        load_generator="perf_analyzer" if settings.perf_analyzer else "built-in load generator",
        concurrencies=list(settings.concurrencies),
        wall_s=time.monotonic() - started,
        complete=complete,
        interrupted=interrupted,
    )
    if chosen is not None:
        output.write_repository(settings.repository, settings.output, space, chosen.candidate, target.needed)
        runners_up = [o for o in ranked(outcomes, goal)[1:] if o.best(goal)][: settings.runners_up]
        for rank, o in enumerate(runners_up, start=2):
            output.write_configs(
                settings.repository, report_dir / "next_best" / str(rank), space, o.candidate
            )
    page = report.write_report(document, report_dir)
    print(document["verdict"], file=out)
    print(
        f"nereid analyze: report {page}" + (f"; best config in {settings.output}" if chosen else ""), file=out
    )
    if interrupted:
        raise KeyboardInterrupt
    return document


def analyze(settings: AnalyzeSettings, out: TextIO = sys.stdout) -> int:
    settings.report.mkdir(parents=True, exist_ok=True)
    if settings.url is not None:
        driver = ServerDriver(settings.url, settings.grpc_url, settings.server_pid)
        if settings.server_pid is None:
            print("nereid analyze: no --server-pid: CPU and memory are not measured", file=out)
    else:
        driver = ServerDriver.start(settings.repository, _free_ports(), settings.report / "server.log")
    summaries = []
    status = 0
    try:
        known = driver.repository_models()
        for name in settings.models:
            folder = settings.report if len(settings.models) == 1 else settings.report / name
            try:
                target = _target(driver, name, known)
                document = _analyze_model(settings, driver, target, folder, out)
            except (CandidateFailed, InputError) as exc:
                print(f"nereid analyze: {exc}", file=sys.stderr)
                status = 2
                continue
            if document["chosen"] is None:
                status = status or 3  # bad input (2) says more
            summaries.append(
                {
                    k: document[k]
                    for k in (
                        "created",
                        "models",
                        "search",
                        "goal",
                        "verdict",
                        "chosen",
                        "measured",
                        "wall_s",
                    )
                }
                | {"top": document["candidates"][:5], "report": str((folder / "report.html").resolve())}
            )
    except KeyboardInterrupt:
        status = 130
    finally:
        driver.stop()
    if summaries and any(s["chosen"] for s in summaries):
        settings.output.mkdir(parents=True, exist_ok=True)
        (settings.output / CONSOLE_SUMMARY).write_text(json.dumps({"analyses": summaries}, indent=1))
    return status
