"""A speculated call and where a commit says it came from: shared by the loop, SPORK and SMC's commit.

Kept apart from :mod:`agentspec.runtime.executor` so the parts that create or commit drafts
(:mod:`~agentspec.runtime.spork`, :mod:`~agentspec.runtime.macro_commit`) need nothing of the loop but the
small interface each of them declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import anyio

from agentspec.snapshot import Sandbox
from agentspec.types import Effect, Observation, ToolCall

Source = Literal["authority", "sa", "macro", "reuse", "invalid", "spork"]
"""Who committed a step: the authority on live state, a confirmed draft, a macro, a read-only reuse, an invalid
call's error, or a SPORK early dispatch."""


@dataclass(eq=False)
class Draft:
    """A speculated call, executed (or being executed) in its own fork."""

    call: ToolCall
    effect: Effect
    sandbox: Sandbox | None = None
    observation: Observation | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    tokens: int = 0
    scope: anyio.CancelScope | None = None
    started: float | None = None
    finished: float | None = None
    speculator: str | None = None
    """The speculator that proposed it (a :class:`~agentspec.runtime.governor.panel.SpeculatorPanel` member), if named."""
    alternatives: list[Draft] = field(default_factory=list)
    """The speculator's further guesses for this position (``--spec-width``), best first, each run in its own fork
    of the same parent state as this draft; one of them may be committed instead of it."""

    @property
    def executable(self) -> bool:
        """Whether the draft may run at all: external effects are never executed speculatively."""
        return self.effect is not Effect.EXTERNAL
