"""bench/plot_performance.py reads what bench/dynamic_batching.py --json writes: the headline table's medians
and ratios, and the two PNG plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.append(str(BENCH))  # the benchmarks import each other by module name

import dynamic_batching  # noqa: E402
import plot_performance  # noqa: E402


def results(tmp_path: Path, protocol: str = "http") -> Path:
    """Three rounds of Nereid's two modes, Triton and the HTTP ceiling, written as the benchmark writes them."""
    runs = []
    for name, rates, cpu in (
        ("nereid", [900.0, 1200.0, 1000.0], [150.0, 130.0, 140.0]),
        ("nereid-thread", [1500.0, 1300.0, 1400.0], [60.0, 70.0, 65.0]),
        ("triton", [1000.0, 1000.0, 800.0], [120.0, 125.0, 130.0]),
        ("http-echo", [3000.0, 3100.0, 2900.0], []),
    ):
        run = dynamic_batching.Run(name, (protocol,))
        run.rates[(protocol, 16)] = rates
        if cpu:
            run.cpu_us[(protocol, 16)] = cpu
            run.client_us[(protocol, 16)] = [50.0, 50.0, 50.0]
            run.batch_sizes = [4.0]
        runs.append(run)
    path = tmp_path / f"{protocol}.json"
    dynamic_batching.write_json(path, runs, argparse.Namespace(rounds=3, json=path))
    return path


def test_the_headline_table_gives_medians_and_per_round_ratios(tmp_path: Path) -> None:
    document, cells = plot_performance.load(results(tmp_path))
    assert document["settings"]["rounds"] == 3
    assert document["average_batch"]["triton"] == [4.0]
    lines = plot_performance.table(cells).splitlines()
    assert lines[0].startswith("| protocol | concurrency | Triton infer/s | Triton CPU us |")
    (row,) = lines[2:]
    # Triton: median 1,000 infer/s at 125 us. Process mode: 1,000 infer/s (rounds 0.90, 1.20, 1.25 of
    # Triton's) at 140 us (1.25, 1.04, 1.08); thread mode: 1,400 (1.50, 1.30, 1.75) at 65 us (0.50, 0.56, 0.50)
    assert row == (
        "| HTTP | 16 | 1,000 | 125 | 1,000 (1.00, 0.90-1.25) | 140 (1.12, 1.04-1.25) |"
        " 1,400 (1.40, 1.30-1.75) | 65 (0.52, 0.50-0.56) |"
    )


def test_files_are_read_as_one(tmp_path: Path) -> None:
    """One run per protocol gives one table; a cell in two files gets the rounds of both."""
    http, grpc = results(tmp_path, "http"), results(tmp_path, "grpc")
    document, cells = plot_performance.merge([http, grpc])
    assert [row.split(" | ")[0] for row in plot_performance.table(cells).splitlines()[2:]] == [
        "| HTTP",
        "| gRPC",
    ]
    assert document["average_batch"]["triton"] == [4.0, 4.0]
    _, twice = plot_performance.merge([http, http])
    assert twice[("nereid", "http", 16)]["infer_per_sec"] == [900.0, 1200.0, 1000.0] * 2
    assert cells[("nereid", "http", 16)]["infer_per_sec"] == [900.0, 1200.0, 1000.0]  # not grown by the merge


def test_the_plots_are_png_files(tmp_path: Path) -> None:
    _, cells = plot_performance.load(results(tmp_path))
    written = plot_performance.plot(cells, tmp_path / "img")
    assert [p.name for p in written] == ["performance-throughput.png", "performance-cpu.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_other_json_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"benchmark": "python_backend", "cells": []}')
    with pytest.raises(SystemExit, match="not the JSON of bench/dynamic_batching.py --json"):
        plot_performance.load(other)


def test_the_performance_page_shows_the_table_of_its_runs() -> None:
    """docs/performance.md's headline table is the one its committed runs give, row for row."""
    docs = BENCH.parent / "docs"
    _, cells = plot_performance.merge(
        [docs / "img" / "performance-http.json", docs / "img" / "performance-grpc.json"]
    )
    page = (docs / "performance.md").read_text()
    for row in plot_performance.table(cells).splitlines():
        assert row in page
