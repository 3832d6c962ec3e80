"""Draft statistics: plain counters that the decoder fills and sinks read.

:class:`DraftStats` holds one request's (or one benchmark's) counts:
target forwards, committed tokens, and per draft source how many tokens were
drafted and how many were accepted.  ``observe(source, drafted, accepted)``
is the only way counts go in; :meth:`DraftStats.merge` aggregates requests.
Sinks (the server's ``usage`` field, the benchmark's JSON) read
:meth:`DraftStats.as_dict`; nothing here prints or exports::

    >>> stats = DraftStats()
    >>> stats.forward(tokens=4)
    >>> stats.observe("schema", drafted=10, accepted=3)
    >>> stats.observe("bonus", drafted=0, accepted=1)
    >>> stats.tokens_per_forward, stats.as_dict()["accepted_by_source"]
    (4.0, {'schema': 3, 'bonus': 1})
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DraftStats", "acceptance_rate"]


def acceptance_rate(drafted: int, accepted: int) -> float:
    """Accepted drafted tokens over drafted tokens (0 when nothing was drafted)."""
    return accepted / drafted if drafted else 0.0


@dataclass
class DraftStats:
    """Counters of one request or an aggregate of many."""

    forwards: int = 0
    """Target forwards, the prompt's prefill included (plain greedy: one per token)."""
    tokens: int = 0
    """Committed output tokens."""
    tree_nodes: int = 0
    """Draft nodes sent to the target, summed over forwards."""
    drafted: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    near_ties: list[dict[str, Any]] = field(default_factory=list)
    rechecks: int = 0
    """Forwards spent deciding a near tie in a plain pass."""
    requests: int = 0
    drafter_errors: Counter[str] = field(default_factory=Counter)
    """Proposals that raised, by drafter name (the tree is built without them; output is unchanged)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time by phase (prefill, draft, verify, sidecar...)."""

    def forward(self, tokens: int, tree_nodes: int = 0) -> None:
        self.forwards += 1
        self.tokens += tokens
        self.tree_nodes += tree_nodes

    def observe(self, source: str, drafted: int, accepted: int) -> None:
        """Count ``drafted`` tokens proposed by ``source`` and ``accepted`` of its tokens committed."""
        if drafted:
            self.drafted[source] += drafted
        if accepted:
            self.accepted[source] += accepted

    def time(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0

    def merge(self, other: DraftStats) -> None:
        self.forwards += other.forwards
        self.tokens += other.tokens
        self.tree_nodes += other.tree_nodes
        self.drafted.update(other.drafted)
        self.accepted.update(other.accepted)
        self.near_ties.extend(other.near_ties)
        self.rechecks += other.rechecks
        self.drafter_errors.update(other.drafter_errors)
        self.requests += max(other.requests, 1)
        for phase, seconds in other.seconds.items():
            self.time(phase, seconds)

    def as_dict(self) -> dict[str, Any]:
        total = sum(self.accepted.values())
        return {
            "target_forwards": self.forwards,
            "tokens": self.tokens,
            "tokens_per_forward": round(self.tokens_per_forward, 4),
            "tree_nodes_per_forward": round(self.tree_nodes / self.forwards, 2) if self.forwards else 0.0,
            "drafted_by_source": dict(self.drafted),
            "accepted_by_source": dict(self.accepted),
            "accepted_share_by_source": {k: round(v / total, 4) for k, v in self.accepted.items()} if total else {},
            "acceptance_rate_by_source": {
                k: round(acceptance_rate(self.drafted[k], self.accepted.get(k, 0)), 4) for k in self.drafted
            },
            "near_ties": list(self.near_ties),
            "rechecks": self.rechecks,
            "drafter_errors": dict(self.drafter_errors),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
        }
