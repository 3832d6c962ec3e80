"""A mode's summary from its tasks' metrics: counters summed, times averaged, wall-time percentiles, panels merged.

Kept apart from the per-task counters (:mod:`agentspec.runtime.metrics`) so the figures a mode reports are computed
in one place, after the tasks ran.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.stats import percentile


def _sum_lists(lists: Sequence[list[int]]) -> list[int]:
    width = max((len(x) for x in lists), default=0)
    return [sum(x[i] for x in lists if i < len(x)) for i in range(width)]


LABELS = ("macro_commit",)
"""Text fields: a mode's summary holds their distinct values, not a sum."""
PANEL = "speculators"
"""Per panel member counts: a mode's summary holds them summed per member (:func:`sum_panels`)."""
NUMERIC = [name for name in ExecutionMetrics.__dataclass_fields__ if name not in (*LABELS, PANEL)]


def aggregate(per_task: Sequence[ExecutionMetrics]) -> dict[str, Any]:
    """Totals of the counters, means of the times, and P50/P95 of task wall time."""
    if not per_task:
        return {}
    out: dict[str, Any] = {}
    for name in NUMERIC:
        values = [getattr(m, name) for m in per_task]
        if name.endswith(("_by_depth", "_by_rank")):
            out[name] = _sum_lists(values)
        elif name == "wall_s":
            out["mean_task_wall_s"] = round(statistics.fmean(values), 4)
        elif name.endswith("_s"):
            out[f"mean_{name}"] = round(statistics.fmean(values), 4)
        else:
            out[name] = sum(values)
    made = out["predictions_by_depth"]
    for kind in ("", "name_"):
        hits = out[f"{kind}hits_by_depth"] + [0] * (len(made) - len(out[f"{kind}hits_by_depth"]))  # older logs: none
        rates = [round(hit / n, 4) if n else None for hit, n in zip(hits, made, strict=True)]
        out[f"speculator_{kind}hit_rate_by_depth"] = rates
        out[f"speculator_{kind}hit_rate"] = rates[0] if rates else None  # the next call, what SA confirms
    reported = out["authority_reported_calls"]
    out["authority_forwards_per_call"] = round(out["authority_forwards"] / reported, 3) if reported else None
    for name in LABELS:
        labels = sorted({value for m in per_task if (value := getattr(m, name)) is not None})
        if labels:
            out[name] = "; ".join(labels)
    panels = sum_panels([m.speculators for m in per_task])
    if panels is not None:
        out[PANEL] = panels
    walls = [m.wall_s for m in per_task]
    out["p50_wall_s"] = round(percentile(walls, 0.5), 4)
    out["p95_wall_s"] = round(percentile(walls, 0.95), 4)
    return out


def sum_panels(per_task: Sequence[dict[str, dict[str, int]] | None]) -> dict[str, dict[str, int]] | None:
    """Each member's counts summed over the tasks that had a panel (members in the order first seen); None when
    none had one.

    >>> sum_panels([{"learned": {"calls": 2, "ends": 1}}, None, {"learned": {"calls": 1, "ends": 0}}])
    {'learned': {'calls': 3, 'ends': 1}}
    """
    panels = [panel for panel in per_task if panel is not None]
    if not panels:
        return None
    out: dict[str, dict[str, int]] = {}
    for panel in panels:
        for name, counts in panel.items():
            total = out.setdefault(name, {})
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value
    return out

