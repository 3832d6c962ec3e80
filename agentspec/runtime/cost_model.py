"""SPORK's live cost model: probe only where the expected time saved exceeds the expected cost.

Learned from what the run has seen so far, per tool (and overall for the agent):

* ``hit_rate``: posterior mean of Beta(1 + hits, 1 + misses) of dispatched probes;
* ``tool_s``: mean latency of the tool (what an early dispatch can hide);
* ``remaining_s``: mean decode time left after a probe's answer (the window the tool can overlap with);
* ``probe_s``: mean latency of a probe, charged at ``contention`` (1.0 when probes share the authority's
  hardware, as on one CPU or GPU; 0 when they run elsewhere).

    saved = hit_rate * min(tool_s, remaining_s)
    cost  = contention * probe_s + (1 - hit_rate) * waste_weight * tool_s

Before any data the model is optimistic (it probes), so it can learn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Running:
    total: float = 0.0
    count: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1

    def mean(self, default: float) -> float:
        return self.total / self.count if self.count else default


@dataclass
class ToolStats:
    hits: int = 0
    misses: int = 0
    tool_s: Running = field(default_factory=Running)

    @property
    def hit_rate(self) -> float:
        return (1 + self.hits) / (2 + self.hits + self.misses)


@dataclass
class CostModel:
    contention: float = 1.0
    waste_weight: float = 0.5
    enabled: bool = True
    tools: dict[str, ToolStats] = field(default_factory=dict)
    agent: ToolStats = field(default_factory=ToolStats)
    probe_s: Running = field(default_factory=Running)
    remaining_s: Running = field(default_factory=Running)
    skipped_probes: int = 0
    skipped_dispatches: int = 0

    def _stats(self, tool: str | None) -> ToolStats:
        return self.tools.setdefault(tool, ToolStats()) if tool else self.agent

    def terms(self, tool: str | None = None) -> dict[str, float]:
        stats = self._stats(tool)
        hit = stats.hit_rate
        tool_s = stats.tool_s.mean(self.agent.tool_s.mean(1.0))
        remaining = self.remaining_s.mean(tool_s)  # no data yet: assume the whole tool can be hidden
        saved = hit * min(tool_s, remaining)
        cost = self.contention * self.probe_s.mean(0.0) + (1 - hit) * self.waste_weight * tool_s
        return {"hit_rate": hit, "tool_s": tool_s, "remaining_s": remaining, "probe_s": self.probe_s.mean(0.0),
                "saved_s": saved, "cost_s": cost}

    def should_probe(self) -> bool:
        """Per agent, before probing."""
        if not self.enabled:
            return True
        terms = self.terms()
        worth = terms["saved_s"] > terms["cost_s"]
        self.skipped_probes += int(not worth)
        return worth

    def should_dispatch(self, tool: str) -> bool:
        """Per tool, once a probe named it."""
        if not self.enabled:
            return True
        terms = self.terms(tool)
        worth = terms["saved_s"] > terms["cost_s"] - self.contention * terms["probe_s"]  # the probe is already paid
        self.skipped_dispatches += int(not worth)
        return worth

    def observe_probe(self, seconds: float) -> None:
        self.probe_s.add(seconds)

    def observe_outcome(self, tool: str, hit: bool, remaining_s: float | None) -> None:
        for stats in (self._stats(tool), self.agent):
            stats.hits += int(hit)
            stats.misses += int(not hit)
        if remaining_s is not None:
            self.remaining_s.add(max(0.0, remaining_s))

    def observe_tool(self, tool: str, seconds: float) -> None:
        self._stats(tool).tool_s.add(seconds)
        self.agent.tool_s.add(seconds)

    def report(self) -> dict[str, Any]:
        """The model's terms, overall and per tool, for the run's metrics."""
        return {
            "agent": self.terms(),
            "tools": {name: self.terms(name) | {"hits": s.hits, "misses": s.misses} for name, s in sorted(self.tools.items())},
            "skipped_probes": self.skipped_probes,
            "skipped_dispatches": self.skipped_dispatches,
        }
