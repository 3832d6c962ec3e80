"""Per-task execution metrics, timeline events, and run-level aggregates."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Event:
    """One interval on a task's timeline: which lane, when, and what."""

    lane: str  # "authority" | "speculator" | "tool" | "commit"
    start: float
    end: float
    label: str
    kind: str = ""


@dataclass
class ExecutionMetrics:
    """What one task's execution cost and saved."""

    wall_s: float = 0.0
    authority_wait_s: float = 0.0
    tool_wait_s: float = 0.0
    speculator_busy_s: float = 0.0
    draft_wait_s: float = 0.0
    """Time the authority waited for the speculator's guess before deciding (``draft_first``, recording runs)."""
    authority_calls: int = 0
    authority_skipped: int = 0
    speculator_calls: int = 0
    commits_sa: int = 0
    commits_macro: int = 0
    macro_firings: int = 0
    reused_read_only: int = 0
    live_executions: int = 0
    drafts_discarded: int = 0
    wasted_tool_calls: int = 0
    wasted_tokens: int = 0
    speculative_tool_calls: int = 0
    snapshot_failures: int = 0
    macro_checks: int = 0
    macro_disagreements: int = 0
    macro_commit: str | None = None
    """SMC: ``verified``, ``trusted``, or ``trusted (verification unavailable: <reason>)`` (None in other modes)."""
    chains_verified: int = 0
    """SMC verified: fired macros' chains the authority verified before committing."""
    chain_steps_offered: int = 0
    """Steps in those chains."""
    chain_steps_accepted: int = 0
    """Of them, the steps the authority made itself (committed)."""
    chain_steps_rejected: int = 0
    """Steps the authority refused: at most one per chain (the steps after it were not judged; they stay drafts)."""
    verify_s: float = 0.0
    """Time the verifications took (on the critical path: the authority's next decision waits for them)."""
    probes: int = 0
    probe_hits: int = 0
    probe_name_hits: int = 0
    probe_tokens: int = 0
    probe_prompt_tokens: int = 0
    probe_cached_tokens: int = 0
    """Prompt tokens of the probes the endpoint served from its prefix cache (when it reports them)."""
    gated_out: int = 0
    invalid_probes: int = 0
    early_dispatches: int = 0
    commits_spork: int = 0
    time_overlapped_s: float = 0.0
    authority_reported_calls: int = 0
    """Authority decisions whose endpoint reported its decoding (``agentspec serve --decoder toolspec``)."""
    authority_forwards: int = 0
    """Target-model forwards those decisions took."""
    authority_hint_tokens: int = 0
    """Of their tokens, those accepted from the speculator's predicted call (draft source ``hint.speculator``)."""
    late_hints: int = 0
    """Speculator predictions of the next call handed to the authority's request while it was already running."""
    late_hints_delivered: int = 0
    """Of those, the ones its endpoint took (``agentspec serve --decoder toolspec``; others take none)."""
    alternative_tool_calls: int = 0
    """Speculated calls run in forks as the speculator's further guesses for a position (``--spec-width`` > 1)."""
    hits_by_rank: list[int] = field(default_factory=list)
    """[r]: drafts committed as the authority's call that were the speculator's guess of rank r (0: its head
    guess, 1 and more: its alternatives, ``--spec-width``)."""
    predictions_by_depth: list[int] = field(default_factory=list)
    """[d-1]: speculator drafts standing at chain depth d when the authority decided a step."""
    hits_by_depth: list[int] = field(default_factory=list)
    """[d-1]: of those, the drafts equal to the call committed d-1 steps later (the speculator's hit rate by depth)."""
    name_hits_by_depth: list[int] = field(default_factory=list)
    """[d-1]: of those, the drafts naming the same tool as the call committed d-1 steps later."""

    def score_predictions(self, standing: Sequence[tuple[int, Sequence[Any]]], committed: Sequence[Any]) -> None:
        """Count each standing chain ``(step it was standing at, drafted calls)`` against the committed calls."""
        for base, calls in standing:
            for depth, call in enumerate(calls, 1):
                step = base + depth - 1
                if step >= len(committed):
                    break
                _bump(self.predictions_by_depth, depth)
                _grow(self.hits_by_depth, depth)
                _grow(self.name_hits_by_depth, depth)
                self.hits_by_depth[depth - 1] += int(committed[step] == call)
                self.name_hits_by_depth[depth - 1] += int(committed[step].name == call.name)

    def hit_at_rank(self, rank: int) -> None:
        """Count a committed draft that was the speculator's guess of ``rank`` (0: the head guess)."""
        _bump(self.hits_by_rank, rank + 1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _grow(counts: list[int], depth: int) -> None:
    counts.extend([0] * (depth - len(counts)))


def _bump(counts: list[int], depth: int) -> None:
    _grow(counts, depth)
    counts[depth - 1] += 1


def _sum_lists(lists: Sequence[list[int]]) -> list[int]:
    width = max((len(x) for x in lists), default=0)
    return [sum(x[i] for x in lists if i < len(x)) for i in range(width)]


LABELS = ("macro_commit",)
"""Text fields: a mode's summary holds their distinct values, not a sum."""
NUMERIC = [name for name in ExecutionMetrics.__dataclass_fields__ if name not in LABELS]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = (len(ordered) - 1) * q
    low, high = int(index), min(int(index) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


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
    walls = [m.wall_s for m in per_task]
    out["p50_wall_s"] = round(percentile(walls, 0.5), 4)
    out["p95_wall_s"] = round(percentile(walls, 0.95), 4)
    return out


@dataclass
class Timeline:
    events: list[Event] = field(default_factory=list)

    def add(self, lane: str, start: float, end: float, label: str, kind: str = "") -> None:
        self.events.append(Event(lane, start, end, label, kind))
