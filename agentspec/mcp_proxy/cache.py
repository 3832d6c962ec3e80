"""Pre-executed results, kept until their call comes, and dropped the moment they may be stale.

A result is served only to the identical call (same tool, canonical-equal arguments), once, and only while no
non-read-only call went through since its pre-execution started: every such call (a write, a tool the proxy does
not trust, an unknown tool) drops everything, running pre-executions included (:meth:`PreExecutions.begin_write`).
The bounds: at most ``max_inflight`` pre-executions running, ``max_cache_bytes`` of results kept (oldest evicted
first), each kept at most ``max_age_s`` (the world outside the proxy may change meanwhile).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import types

from agentspec.mcp_proxy.stats import ProxyStats
from agentspec.types import canonical_json


def call_key(name: str, arguments: dict[str, Any] | None) -> str:
    """What makes two calls identical: the tool and the canonical JSON of the arguments (absent = empty)."""
    return canonical_json([name, arguments or {}])


@dataclass(eq=False)
class Entry:
    """One pre-execution: running until :attr:`done` is set; then :attr:`result` (None: it failed)."""

    key: str
    generation: int
    started: float
    done: anyio.Event = field(default_factory=anyio.Event)
    result: types.CallToolResult | None = None
    upstream_s: float = 0.0
    finished: float = 0.0
    size: int = 0
    dropped: bool = False
    """No call will use it (invalidated, evicted, expired, failed): its waste is counted already."""
    claimed: bool = False
    """A client call took it (served, or joined while it ran)."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """The pre-execution's cancel scope, made before it runs: its deadline (lifted when a call joins it), and
    cancelled when the call that joined it gives up."""


class PreExecutions:
    """The pre-executed results by call key, and what invalidates them (see the module docstring)."""

    def __init__(self, stats: ProxyStats, *, max_inflight: int, max_bytes: int, max_age_s: float) -> None:
        self.stats = stats
        self.max_inflight = max_inflight
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.generation = 0
        """Bumped by every non-read-only call: an entry of an older generation may be stale."""
        self.writes = 0
        """Non-read-only calls in flight: nothing is served or started meanwhile."""
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.running: set[Entry] = set()
        self.bytes = 0

    # ------------------------------------------------------------------ the client's side

    def claim(self, key: str) -> Entry | None:
        """The pre-execution that may answer the call ``key`` now (taken: it answers one call), or None."""
        entry = self.entries.get(key)
        if entry is None or self.writes or entry.generation != self.generation:
            return None
        del self.entries[key]
        self.bytes -= entry.size
        if entry.done.is_set() and anyio.current_time() - entry.finished > self.max_age_s:
            self._drop(entry, "expired")
            return None
        entry.claimed = True
        return entry

    def begin_write(self) -> list[Entry]:
        """A non-read-only call is about to go through: drop every result and running pre-execution; the running
        ones are returned, for the call to wait until they end (a guess never runs beside a write)."""
        self.generation += 1
        self.writes += 1
        self.stats.invalidations += 1
        for entry in self.entries.values():
            self._drop(entry, "invalidated")
        self.entries.clear()
        self.bytes = 0
        return [entry for entry in self.running if not entry.done.is_set()]

    def end_write(self) -> None:
        self.writes -= 1

    # ------------------------------------------------------------------ the pre-executions' side

    def may_start(self, key: str) -> bool:
        """Whether a pre-execution of ``key`` may start now (no write in flight, not already there, room)."""
        if self.writes or key in self.entries:
            return False
        if len(self.running) >= self.max_inflight:
            self.stats.skipped_full += 1
            return False
        return True

    def start(self, key: str, timeout_s: float = math.inf) -> Entry:
        """Register a pre-execution of ``key`` about to run, with ``timeout_s`` to run in."""
        now = anyio.current_time()
        entry = Entry(key, self.generation, now, scope=anyio.CancelScope(deadline=now + timeout_s))
        self.entries[key] = entry
        self.running.add(entry)
        self.stats.pre_executed += 1
        return entry

    def finish(self, entry: Entry, result: types.CallToolResult | None, upstream_s: float, why: str = "failed") -> None:
        """A pre-execution ended (``result`` None: it failed, for reason ``why``): keep its result for its call,
        or drop it (stale, too big, failed); evict the oldest results past the byte bound."""
        self.running.discard(entry)
        entry.result, entry.upstream_s, entry.finished = result, upstream_s, anyio.current_time()
        self.stats.pre_executed_s += upstream_s
        entry.done.set()
        if entry.dropped:
            return
        if result is None:
            self._forget(entry, why)
            return
        entry.size = len(result.model_dump_json(by_alias=True, exclude_none=True))
        if entry.claimed:
            return  # a call joined it while it ran: that call has it
        if entry.size > self.max_bytes:
            self._forget(entry, "too-big")
            return
        self.bytes += entry.size
        self.stats.cache_bytes_peak = max(self.stats.cache_bytes_peak, self.bytes)
        while self.bytes > self.max_bytes:
            oldest = next(e for e in self.entries.values() if e.done.is_set())
            self._forget(oldest, "evicted")
            self.bytes -= oldest.size

    def close(self) -> None:
        """The proxy stops: what no call used is waste."""
        for entry in self.entries.values():
            self._drop(entry, "unused")
        self.entries.clear()

    def _forget(self, entry: Entry, why: str) -> None:
        if self.entries.get(entry.key) is entry:
            del self.entries[entry.key]
        self._drop(entry, why)

    def _drop(self, entry: Entry, why: str) -> None:
        if not entry.dropped:
            entry.dropped = True
            self.stats.waste(why)
