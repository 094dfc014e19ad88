"""Plots and the headline table of docs/performance.md, from the JSON that `dynamic_batching.py --json` writes.

    python bench/plot_performance.py RESULTS.json [MORE.json ...] [--out docs/img] [--table]

Writes two PNG files into --out: infer/s against concurrency (`performance-throughput.png`) and the
server's CPU microseconds per request against concurrency (`performance-cpu.png`), one panel per
protocol, each server's median over the rounds with the lowest and highest round as a bar. `--table`
also prints the headline table in Markdown: per protocol and concurrency, each server's median infer/s
and CPU per request, Nereid's with their ratios to Triton's and the range of the per-round ratios. Several files (say, one run per
protocol) are read as one: a cell found in two of them gets the rounds of both.

Needs matplotlib (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

# server name in the JSON -> label in the plots and the table; the order they are drawn and listed in
LABELS = {
    "triton": "Triton 2.51",
    "nereid": "Nereid, process mode",
    "nereid-thread": "Nereid, thread mode",
    "http-echo": "bare uvicorn (no model)",
    "grpc-echo": "bare grpc.aio (no model)",
}
COLOURS = {"triton": "#555555", "nereid": "#1f77b4", "nereid-thread": "#2ca02c"}  # the ceilings: light grey
CEILINGS = ("http-echo", "grpc-echo")
PROTOCOLS = {"http": "HTTP", "grpc": "gRPC"}

Cells = dict[tuple[str, str, int], dict[str, Any]]  # (server, protocol, concurrency) -> its JSON cell


def load(path: Path) -> tuple[dict[str, Any], Cells]:
    document = json.loads(path.read_text())
    if document.get("benchmark") != "dynamic_batching":
        raise SystemExit(f"{path}: not the JSON of bench/dynamic_batching.py --json")
    cells = {(c["server"], c["protocol"], c["concurrency"]): c for c in document["cells"]}
    return document, cells


def merge(paths: list[Path]) -> tuple[dict[str, Any], Cells]:
    """The cells of every file; the rounds of a cell found in more than one, one after the other."""
    documents: list[dict[str, Any]] = []
    cells: Cells = {}
    for path in paths:
        document, more = load(path)
        documents.append(document)
        for key, cell in more.items():
            if key not in cells:
                cells[key] = {k: list(v) if isinstance(v, list) else v for k, v in cell.items()}
                continue
            for figure in ("infer_per_sec", "cpu_us", "client_cpu_us"):
                cells[key][figure] += cell[figure]
    batches: dict[str, list[float]] = {}
    for document in documents:
        for server, sizes in document.get("average_batch", {}).items():
            batches.setdefault(server, []).extend(sizes)
    return {**documents[0], "average_batch": batches}, cells


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, lowest, highest)."""
    return statistics.median(values), min(values), max(values)


def plot(cells: Cells, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    protocols = [p for p in PROTOCOLS if any(k[1] == p for k in cells)]
    written = []
    for figure, key, unit in (
        ("performance-throughput.png", "infer_per_sec", "infer/s (higher is better)"),
        ("performance-cpu.png", "cpu_us", "server CPU us per request (lower is better)"),
    ):
        fig, axes = plt.subplots(1, len(protocols), figsize=(5.5 * len(protocols), 4.2), squeeze=False)
        for ax, protocol in zip(axes[0], protocols, strict=True):
            for server, label in LABELS.items():
                points = sorted(
                    (c, v[key]) for (s, p, c), v in cells.items() if s == server and p == protocol
                )
                points = [(c, values) for c, values in points if values]  # the ceilings keep no CPU figure
                if not points:
                    continue
                x = [c for c, _ in points]
                mid, low, high = zip(*(spread(values) for _, values in points), strict=True)
                errors = [
                    [m - lo for m, lo in zip(mid, low, strict=True)],
                    [h - m for m, h in zip(mid, high, strict=True)],
                ]
                style = "--" if server in CEILINGS else "-"
                colour = COLOURS.get(server, "#aaaaaa")
                ax.errorbar(
                    x, mid, yerr=errors, label=label, linestyle=style, marker="o", capsize=3, color=colour
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({c for (_, p, c) in cells if p == protocol}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("concurrency (perf_analyzer)")
            ax.set_ylabel(unit)
            ax.set_ylim(bottom=0)
            ax.set_title(f"add_sub, dynamic batching, {PROTOCOLS[protocol]}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(out / figure, dpi=110)
        plt.close(fig)
        written.append(out / figure)
    return written


def table(cells: Cells) -> str:
    """The headline table: Triton's median infer/s and CPU per request, and each Nereid mode's, each with its
    ratio to Triton's (of the medians) and the lowest and highest of the per-round ratios."""
    nereids = [s for s in ("nereid", "nereid-thread") if any(k[0] == s for k in cells)]
    head = "| protocol | concurrency | Triton infer/s | Triton CPU us |"
    rule = "|---|---:|---:|---:|"
    for server in nereids:
        head += f" {LABELS[server]}: infer/s (x Triton, per round) | CPU us (x Triton, per round) |"
        rule += "---:|---:|"
    lines = [head, rule]
    for protocol in PROTOCOLS:
        for concurrency in sorted({c for (s, p, c) in cells if p == protocol}):
            triton = cells[("triton", protocol, concurrency)]
            rate, cpu = statistics.median(triton["infer_per_sec"]), statistics.median(triton["cpu_us"])
            line = f"| {PROTOCOLS[protocol]} | {concurrency} | {rate:,.0f} | {cpu:.0f} |"
            for server in nereids:
                mine = cells[(server, protocol, concurrency)]
                line += f" {against(mine['infer_per_sec'], triton['infer_per_sec'], ',.0f')} |"
                line += f" {against(mine['cpu_us'], triton['cpu_us'], '.0f')} |"
            lines.append(line)
    return "\n".join(lines)


def against(mine: list[float], triton: list[float], form: str) -> str:
    """'median (median / Triton's median, lowest-highest per-round ratio)'; rounds pair up in order."""
    ratios = sorted(n / t for n, t in zip(mine, triton, strict=True))
    median = statistics.median(mine)
    return f"{median:{form}} ({median / statistics.median(triton):.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, nargs="+", help="the JSON of dynamic_batching.py --json")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="folder for the PNG files")
    parser.add_argument("--table", action="store_true", help="also print the headline table in Markdown")
    args = parser.parse_args()
    document, cells = merge(args.results)
    for path in plot(cells, args.out):
        print(f"wrote {path}")
    if args.table:
        print(table(cells))
        batches = document.get("average_batch", {})
        print(", ".join(f"{LABELS.get(s, s)} {statistics.mean(b):.1f}" for s, b in batches.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
