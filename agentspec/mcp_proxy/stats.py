"""What the proxy saved and what it cost: counted while it runs, printed on stderr and written as JSON at exit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, Field

from agentspec.errors import ConfigError


class ProxyStats(BaseModel):
    """The proxy's counters (one JSON object in ``--stats FILE``).

    ``hits``: client calls answered from a pre-executed result (finished, or still running and joined);
    ``time_saved_s``: the upstream time those hits did not wait for (a finished result's whole upstream time, a
    joined one's time already run); ``wasted``: pre-executed calls whose result no client call used, by why
    (``wasted_by``).  ``write_wait_s``: time non-read-only calls waited for pre-executions still running (so that a
    write never runs beside a guess)."""

    calls: int = 0
    """Client tool calls."""
    forwarded: int = 0
    """Client calls sent to an upstream (every call but the hits)."""
    speculable_calls: int = 0
    """Client calls of tools the proxy may pre-execute (trusted ``readOnlyHint`` or ``--read-only``)."""
    hits: int = 0
    joined: int = 0
    """Of the hits, those that found their pre-execution still running and waited for it."""
    pre_executed: int = 0
    wasted: int = 0
    wasted_by: dict[str, int] = Field(default_factory=dict)
    invalidations: int = 0
    """Non-read-only calls forwarded (each one drops every cached and running pre-execution)."""
    predictions: int = 0
    skipped_full: int = 0
    """Guesses not pre-executed because ``max_inflight`` pre-executions were running."""
    time_saved_s: float = 0.0
    upstream_s: float = 0.0
    """Upstream time of the client's forwarded calls."""
    pre_executed_s: float = 0.0
    """Upstream time of every pre-execution (the extra load the guesses put on the upstreams)."""
    write_wait_s: float = 0.0
    cache_bytes_peak: int = 0
    resource_reads: int = 0
    """Resource reads forwarded (resources and prompts are never pre-executed)."""
    prompts: int = 0
    """Prompt requests forwarded."""

    @property
    def hit_rate(self) -> float:
        """Hits per call of a tool the proxy may pre-execute."""
        return self.hits / self.speculable_calls if self.speculable_calls else 0.0

    def waste(self, why: str, count: int = 1) -> None:
        """Count ``count`` pre-executions no call used, for reason ``why``."""
        self.wasted += count
        self.wasted_by[why] = self.wasted_by.get(why, 0) + count

    def summary(self) -> dict[str, object]:
        """The JSON object written to ``--stats``: the counters, the hit rate, times rounded to the millisecond."""
        data = self.model_dump()
        for key, value in data.items():
            if key.endswith("_s"):
                data[key] = round(value, 3)
        data["hit_rate"] = round(self.hit_rate, 4)
        return data

    def line(self) -> str:
        """One line for a person (stderr at exit)."""
        return (f"agentspec mcp-proxy: {self.calls} calls, {self.hits} hits of {self.speculable_calls} read-only "
                f"({self.hit_rate:.0%}), {self.pre_executed} pre-executed ({self.wasted} wasted), "
                f"{self.time_saved_s:.3f}s of upstream time saved, {self.write_wait_s:.3f}s writes waited")

    def report(self, stats_file: Path | None, stream: TextIO | None = None) -> None:
        """Print :meth:`line` on ``stream`` (stderr) and write :meth:`summary` to ``stats_file`` when given."""
        print(self.line(), file=stream or sys.stderr, flush=True)
        if stats_file is not None:
            try:
                stats_file.parent.mkdir(parents=True, exist_ok=True)
                stats_file.write_text(json.dumps(self.summary(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot write the stats file {stats_file}: {exc.strerror or exc}") from None
