"""What the governor knows of each speculator and of verified macro commits, and how sure a verdict must be: the
strata decisions are compared in, the evidence a verdict needs, and Student's t for its margin.

Kept apart from the rule (:mod:`agentspec.runtime.governor.rule`) so the thresholds are read in one place.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

CLEAN = 0.05
"""A decision is a baseline sample when no speculator was busy for more than this share of it."""
OVERLAPPED = 0.25
"""A decision counts as overlapped by a speculator busy for at least this share of it (and no other busy)."""
STRATA = 4
"""Decisions are compared within strata by the steps committed before them: 0, 1, 2, and 3 or more."""
CLEAN_PER_STRATUM = 2
"""Baseline decisions a stratum needs before the governor stops holding speculation for it."""


VERIFICATION = "smc verification"
"""The governor report's entry for verified macro commits (beside one entry per speculator)."""


def stratum_of(steps: int) -> int:
    """The stratum of a decision made after ``steps`` committed steps."""
    return min(steps, STRATA - 1)


@dataclass(frozen=True)
class GovernorConfig:
    """How much evidence a verdict needs, and how sure it must be."""

    min_overlapped: int = 4
    min_clean: int = 3
    confidence: float = 0.95
    """One-sided: the cost estimate is lowered by Student's t quantile (0.95 or 0.99) times its standard error
    before it is compared with the saving; few samples mean a wide margin."""
    margin: float = 0.05
    """And the cost's lower bound must exceed the saving by this share of the authority's decision time so far
    (at the baseline's pace): a speculator costing a few milliseconds in noise is not worth a verdict."""
    hold_every: int | None = 2
    """Once a speculator has ``min_overlapped`` overlapped decisions but baseline ones are missing: hold
    speculation for one decision in this many until there are ``min_clean`` (None: never hold)."""
    reprobe_after: int | None = None
    """Let a paused speculator run again after this many decisions (None: it stays paused for the mode)."""
    pauses: bool = True
    """Whether a verdict pauses a speculator; False only measures and reports (the virtual clock, where a
    speculator cannot slow the authority and a difference between decisions is only their own length).  Macro
    verifications are judged on every clock: their time is on the critical path wherever it is counted."""
    min_verifications: int = 5
    """Chain verifications before macro commits may be paused for costing more than they saved."""


@dataclass
class Busy:
    """A speculator's busy clock: seconds it had at least one request in flight."""

    in_flight: int = 0
    since: float = 0.0
    total: float = 0.0

    def clock(self, now: float) -> float:
        return self.total + (now - self.since if self.in_flight else 0.0)


@dataclass
class Account:
    """What the governor knows of one speculator."""

    busy: Busy = field(default_factory=Busy)
    overlapped: list[tuple[float, float, int]] = field(default_factory=list)
    """(decision seconds, share of it this speculator was busy, stratum) of the decisions it alone overlapped."""
    share_total: float = 0.0
    """Sum over every decision of the share this speculator was busy: the overlap its cost is charged for."""
    wait_s: float = 0.0
    saving_s: float = 0.0
    decisions: int = 0
    """Decisions it overlapped at all."""
    paused: bool = False
    paused_at_step: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Mark:
    """A moment the governor was told of (a decision or a wait starting): the clock and each busy clock then."""

    at: float
    busy: dict[str, float]


@dataclass
class Verifications:
    """What verified macro commits cost and saved in a mode."""

    count: int = 0
    spent_s: float = 0.0
    accepted: int = 0
    paused: bool = False
    paused_at_step: int | None = None
    reason: str | None = None


_T_TABLE = {0.95: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812],
            0.99: [31.82, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764]}
_T_LIMIT = {0.95: 1.645, 0.99: 2.326}


def t_quantile(df: int, confidence: float) -> float:
    """Student's t one-sided quantile for ``df`` degrees of freedom (conservative above 10: the df-10 value
    down to 20, the normal's beyond)."""
    if confidence not in _T_TABLE:
        raise ValueError(f"confidence must be one of {sorted(_T_TABLE)}")
    table = _T_TABLE[confidence]
    if df < 1:
        return math.inf
    return table[df - 1] if df <= len(table) else table[-1] if df <= 20 else _T_LIMIT[confidence]


def variance(values: Sequence[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0
