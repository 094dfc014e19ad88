"""What the measurements say: candidates ranked, the verdict, and the report's document (report.json)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from nereid.analyze.search import Goal, Outcome, quick_limit, ranked
from nereid.analyze.space import Space


def candidate_rows(space: Space, outcomes: list[Outcome], goal: Goal) -> list[dict[str, Any]]:
    order = {o.candidate: i + 1 for i, o in enumerate(ranked(outcomes, goal))}
    rows = []
    for o in sorted(outcomes, key=lambda o: order.get(o.candidate, len(order) + 1)):
        best, closest = o.best(goal), o.closest()
        rows.append(
            {
                "key": space.key(o.candidate),
                "describe": space.describe(o.candidate),
                "rank": order.get(o.candidate),
                "failure": o.failure,
                "best": asdict(best) if best else None,
                "closest": asdict(closest) if closest else None,
                "measurements": [asdict(m) for m in o.measurements],
            }
        )
    return rows


def verdict(space: Space, outcomes: list[Outcome], goal: Goal) -> tuple[str, Outcome | None]:
    order = ranked(outcomes, goal)
    chosen = order[0] if order and order[0].best(goal) is not None else None
    default = next((o for o in outcomes if o.candidate == space.default()), None)
    own = default.best(goal) if default is not None else None
    own_text = f"{own.throughput:,.0f} infer/s" if own else "nothing within the goal"
    if chosen is None:
        closest = min((o for o in outcomes if o.measurements), key=lambda o: o.closest().p99_ms, default=None)  # type: ignore[union-attr]
        if closest is None:
            return "No candidate could be measured.", None
        m = closest.closest()
        assert m is not None  # noqa: S101 (closest has measurements)
        return (
            f"No candidate meets the goal (p99 within {goal.latency_budget_ms} ms, at least "
            f"{goal.min_throughput:g} infer/s). The closest: {space.describe(closest.candidate)}, p99 "
            f"{m.p99_ms:.2f} ms at {m.throughput:,.0f} infer/s (concurrency {m.concurrency}).",
            None,
        )
    best = chosen.best(goal)
    assert best is not None  # noqa: S101 (chosen meets the goal)
    ratio = f" ({best.throughput / own.throughput:.2f}x)" if own else ""
    return (
        f"Best: {space.describe(chosen.candidate)}: {best.throughput:,.0f} infer/s{ratio} at concurrency "
        f"{best.concurrency}, p99 {best.p99_ms:.2f} ms, {best.cpu_us_per_infer:,.0f} CPU us per inference; "
        f"the model's own config: {own_text}.",
        chosen,
    )


def document(
    space: Space, outcomes: list[Outcome], goal: Goal, **run: Any
) -> tuple[dict[str, Any], Outcome | None]:
    """report.json's content, and the chosen candidate's outcome (None when nothing meets the goal)."""
    text, chosen = verdict(space, outcomes, goal)
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **run,
        "space_size": space.size(),
        "quick_limit": quick_limit(space),
        "measured": len(outcomes),
        "goal": {"latency_budget_ms": goal.latency_budget_ms, "min_throughput": goal.min_throughput},
        "verdict": text,
        "chosen": space.key(chosen.candidate) if chosen else None,
        "default": space.key(space.default()),
        "candidates": candidate_rows(space, outcomes, goal),
    }, chosen
