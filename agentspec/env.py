"""The environment seam: what the orchestrator, evaluator and executor need from an environment.

An environment executes tool calls for a requestor and can be snapshotted.
Snapshots are frozen values (serialised state plus a content hash) and never
share mutable state with the environment they came from: restoring builds a
new environment instead of patching one in place.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from agentspec.errors import SnapshotError
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """An immutable copy of an environment's state."""

    data: bytes
    digest: str

    @classmethod
    def of(cls, state: Any) -> StateSnapshot:
        try:
            data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise SnapshotError(f"state cannot be snapshotted: {exc}") from exc
        return cls(data=data, digest=hashlib.sha256(data).hexdigest())

    def load(self) -> Any:
        """A fresh, independent copy of the state."""
        return pickle.loads(self.data)


@runtime_checkable
class Environment(Protocol):
    """What agentspec needs from an environment an agent acts in."""

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        """The tools this requestor may call."""
        ...

    def effect(self, name: str) -> Effect:
        """The effect class of a tool (unknown tools are MUTATING)."""
        ...

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run one call; tool failures come back as error observations, never as exceptions."""
        ...

    def snapshot(self) -> StateSnapshot:
        """An independent, immutable copy of the current state."""
        ...

    def restore(self, snapshot: StateSnapshot) -> Self:
        """A new environment in the snapshot's state (this one is left untouched)."""
        ...
