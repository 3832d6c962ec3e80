"""What the draft chain needs of the executor loop: its live state, its books, and how it runs and times a tool.

A protocol, so the chain's parts never import the loop that holds them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Effect, Observation, ToolCall


class ChainHost(Protocol):
    """What the chain needs of the loop: its live state, its books, and how it runs and times a tool."""

    backend: SnapshotBackend
    metrics: ExecutionMetrics
    timeline: Timeline

    def effect(self, name: str) -> Effect:
        ...

    def since_start(self, at: float) -> float:
        ...

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        ...
