"""One task's clock: when it started, and how each tool call is timed and laid on the timeline.

The latency model charges simulated tool time (on trio's virtual clock a run's figures come from it alone); every
execution, live, draft or early dispatch, is also told to whoever learns tool latencies (SPORK's cost model).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio

from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.metrics import Timeline
from agentspec.types import Observation, ToolCall


class TaskClock:
    """Times one task's tools (``latency``: simulated tool time, drawn from ``seed``) on ``timeline``."""

    def __init__(self, timeline: Timeline, latency: LatencyModel | None, seed: int) -> None:
        self.timeline, self.latency = timeline, latency
        self._rng = random.Random(seed)
        self.t0 = 0.0
        self.on_tool: Callable[[str, float], None] | None = None
        """Told each call's tool name and seconds (SPORK learns tool latencies from every execution)."""

    def start(self, already: float = 0.0) -> None:
        """Start the task's clock now, ``already`` seconds into the task (a resumed task's time before it stopped)."""
        self.t0 = anyio.current_time() - already

    def since_start(self, at: float) -> float:
        """Seconds from :meth:`start` to clock time ``at`` (timeline offsets)."""
        return at - self.t0

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        """Run ``call`` with ``execute`` (live state or a fork), charging simulated tool latency and timing it
        on ``lane``."""
        started = anyio.current_time()
        if self.latency is not None:
            await anyio.sleep(self.latency.tool.seconds(call.name, self._rng))
        observation = await execute(call)
        finished = anyio.current_time()
        self.timeline.add(lane, started - self.t0, finished - self.t0, call.name)
        if self.on_tool is not None:
            self.on_tool(call.name, finished - started)
        return observation
