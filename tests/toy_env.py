"""A small key-value environment of our own, for executor safety tests.

Its state records every mutation applied to it (``journal``), so a test can
see exactly which calls ever reached a given state.
"""

from __future__ import annotations

from typing import Any, Self

from agentspec import Effect, Observation, ToolCall, ToolError, Toolkit, tool
from agentspec.env import StateSnapshot
from agentspec.types import Requestor, ToolSpec


class KVTools(Toolkit):
    def __init__(self, data: dict[str, int], journal: list[str]) -> None:
        self.data, self.journal = data, journal

    @tool(Effect.READ_ONLY)
    def get(self, key: str) -> str:
        """Read a key."""
        return f"{key}={self.data.get(key, 0)}"

    @tool(Effect.MUTATING)
    def put(self, key: str, value: int) -> str:
        """Set a key."""
        self.data[key] = value
        self.journal.append(f"put {key} {value}")
        return "ok"

    @tool(Effect.MUTATING)
    def incr(self, key: str) -> str:
        """Increment a key; fails above 3 (a tool error)."""
        if self.data.get(key, 0) >= 3:
            raise ToolError(f"{key} is at its limit")
        self.data[key] = self.data.get(key, 0) + 1
        self.journal.append(f"incr {key}")
        return f"{key}={self.data[key]}"

    @tool(Effect.IDEMPOTENT)
    def reset(self, key: str) -> str:
        """Set a key to zero."""
        self.data[key] = 0
        self.journal.append(f"reset {key}")
        return "ok"

    @tool(Effect.EXTERNAL)
    def notify(self, message: str) -> str:
        """Send a message to the outside world."""
        self.journal.append(f"notify {message}")
        return "sent"


class KVEnvironment:
    """Implements :class:`agentspec.env.Environment`."""

    def __init__(self, data: dict[str, int] | None = None, journal: list[str] | None = None) -> None:
        self.tools = KVTools(dict(data or {}), list(journal or []))

    @property
    def state(self) -> dict[str, Any]:
        return {"data": dict(sorted(self.tools.data.items())), "journal": list(self.tools.journal)}

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.tools.specs()

    def effect(self, name: str) -> Effect:
        return self.tools.effect(name) if self.tools.has_tool(name) else Effect.MUTATING

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return self.tools.run(call, requestor)

    def snapshot(self) -> StateSnapshot:
        return StateSnapshot.of((self.tools.data, self.tools.journal))

    def restore(self, snapshot: StateSnapshot) -> Self:
        data, journal = snapshot.load()
        return type(self)(data, journal)
