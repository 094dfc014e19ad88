"""The report: report.json (every measurement), PNG plots, and report.html, one self-contained page.

The page loads nothing from elsewhere: the plots are the same PNG files, embedded as data URLs. The
plots need matplotlib (`pip install 'nereid[analyze]'`); without it the page and the JSON still carry
every figure, and say that the plots were left out.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLOTS = {
    "throughput_latency.png": "Throughput against p99 latency",
    "cpu.png": "Server CPU per inference",
    "memory.png": "Server resident memory",
}
_TOP_CANDIDATES_PLOTTED = 20


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(p99, throughput) points that no other point beats on both (lower p99, higher throughput)."""
    front: list[tuple[float, float]] = []
    for p99, throughput in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or throughput > front[-1][1]:
            front.append((p99, throughput))
    return front


def _plots(document: dict[str, Any], folder: Path) -> list[str]:
    """The PNG files written into `folder`; none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    candidates = [c for c in document["candidates"] if c["measurements"]]
    points = [(m["p99_ms"], m["throughput"]) for c in candidates for m in c["measurements"]]
    chosen = next((c for c in candidates if c["key"] == document.get("chosen")), None)

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if points:
        xs, ys = zip(*points, strict=True)
        ax.scatter(xs, ys, s=14, color="#8a94a6", label="measurements")
        front = pareto_front(points)
        ax.plot(*zip(*front, strict=True), color="#1f6feb", marker="o", ms=4, label="Pareto front")
    if chosen is not None and chosen["best"] is not None:
        best = chosen["best"]
        ax.scatter(
            [best["p99_ms"]],
            [best["throughput"]],
            s=160,
            marker="*",
            color="#d1242f",
            zorder=5,
            label=f"chosen (concurrency {best['concurrency']})",
        )
    budget = document["goal"]["latency_budget_ms"]
    if budget is not None:
        ax.axvline(budget, color="#d1242f", linestyle="--", linewidth=1, label=f"budget {budget:g} ms")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "throughput_latency.png")
    plt.close(fig)

    shown = candidates[:_TOP_CANDIDATES_PLOTTED]
    labels = [f"#{c['rank']}" for c in shown]
    for name, field, unit in (
        ("cpu.png", "cpu_us_per_infer", "CPU µs per inference"),
        ("memory.png", "rss_mb", "resident MB"),
    ):
        fig, ax = plt.subplots(figsize=(7, 3.2), dpi=110)
        values = [(c["best"] or c["closest"])[field] for c in shown]
        colors = ["#d1242f" if c["key"] == document.get("chosen") else "#1f6feb" for c in shown]
        ax.bar(labels, values, color=colors)
        ax.set_ylabel(unit)
        ax.set_xlabel("candidate (rank)")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(folder / name)
        plt.close(fig)
    return list(PLOTS)


def _cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return html.escape(str(value))


def _page(document: dict[str, Any], folder: Path, plots: list[str]) -> str:
    goal = document["goal"]
    rows = []
    for c in document["candidates"]:
        m = c["best"] or c["closest"] or {}
        status = c["failure"] or (
            "meets the goal" if c["best"] else "outside the goal" if m else "not measured"
        )
        css = ' class="chosen"' if c["key"] == document.get("chosen") else ""
        rows.append(
            f"<tr{css}><td>{_cell(c['rank'])}</td><td>{html.escape(c['describe'])}</td>"
            f"<td>{_cell(m.get('throughput'))}</td><td>{_cell(m.get('concurrency'))}</td>"
            f"<td>{_cell(m.get('p50_ms'), 2)}</td><td>{_cell(m.get('p95_ms'), 2)}</td><td>{_cell(m.get('p99_ms'), 2)}</td>"
            f"<td>{_cell(m.get('cpu_us_per_infer'), 0)}</td><td>{_cell(m.get('rss_mb'), 0)}</td>"
            f"<td>{html.escape(status)}</td></tr>"
        )
    figures = (
        "".join(
            f'<figure><img alt="{html.escape(PLOTS[name])}" src="data:image/png;base64,'
            f'{base64.b64encode((folder / name).read_bytes()).decode()}"/><figcaption>{html.escape(PLOTS[name])}'
            "</figcaption></figure>"
            for name in plots
        )
        or "<p>Plots left out: matplotlib is not installed (pip install 'nereid[analyze]').</p>"
    )
    budget = goal["latency_budget_ms"]
    lines = [
        f"Models: {html.escape(', '.join(document['models']))}; search {document['search']}, "
        f"{document['measured']} candidates measured in {document['wall_s']:.0f} s over {document['protocol']} "
        f"({html.escape(document['load_generator'])}).",
        f"Goal: p99 within {budget:g} ms" if budget is not None else "Goal: no latency budget",
        html.escape(document["verdict"]),
    ]
    if not document["complete"]:
        lines.append("The search was stopped before its end; the report covers what was measured.")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"/><title>Nereid analysis: {html.escape(", ".join(document["models"]))}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2328; }}
table {{ border-collapse: collapse; margin: 12px 0; }}
th, td {{ border: 1px solid #d0d7de; padding: 4px 8px; text-align: right; }}
td:nth-child(2) {{ text-align: left; font-family: ui-monospace, monospace; font-size: 12px; }}
th {{ background: #f6f8fa; }}
tr.chosen td {{ background: #fff4e5; font-weight: 600; }}
figure {{ display: inline-block; margin: 8px; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>Nereid analysis</h1>
{"".join(f"<p>{line}</p>" for line in lines)}
<h2>Plots</h2>
{figures}
<h2>Candidates</h2>
<table><thead><tr><th>rank</th><th>settings</th><th>infer/s</th><th>concurrency</th><th>p50 ms</th>
<th>p95 ms</th><th>p99 ms</th><th>CPU µs/infer</th><th>RSS MB</th><th>status</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<p>Every measurement: <code>report.json</code> beside this page.</p>
</body></html>
"""


def write_report(document: dict[str, Any], folder: Path) -> Path:
    """report.json, the plots and report.html in `folder`; returns the page's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(document, indent=1))
    plots = _plots(document, folder)
    page = folder / "report.html"
    page.write_text(_page(document, folder, plots))
    return page
