"""What every policy is and sees: the :class:`Policy` seam, the :class:`Decision` it returns and the history it is
given (committed steps, continued by drafts or carrying predicted calls).

Kept apart from the policies themselves: the loop, the speculators and every policy build on it, and none of them
needs a model client for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentspec.types import InvalidToolCall, Observation, ToolCall

History = Sequence[tuple[ToolCall, Observation | None]]
Progress = Callable[[str, int], Awaitable[None]]
"""Told the text so far and a token count as an answer streams in."""


class DraftedHistory(list[tuple[ToolCall, Observation | None]]):
    """The committed history continued by the speculator's own drafts; ``committed`` counts the committed steps."""

    def __init__(self, committed: History, drafts: History, state: Any = None) -> None:
        super().__init__([*committed, *drafts])
        self.committed = len(committed)
        self.state = state
        """The fork the last draft ran in (a :class:`~agentspec.snapshot.Sandbox`), where a speculator may look
        ahead; None when unknown."""


class PredictedHistory(list[tuple[ToolCall, Observation | None]]):
    """The committed history, with the calls a speculator predicts the next decision makes (``predicted``).

    A model policy may pass them to its endpoint as draft hints (``agentspec serve`` drafts them; the answer
    stays what it would have been); every other policy reads it as the plain history it is."""

    def __init__(self, committed: History, predicted: Sequence[ToolCall]) -> None:
        super().__init__(committed)
        self.predicted = list(predicted)


def committed_steps(history: History) -> int:
    """How many steps of ``history`` are committed (drafts that continue it are not)."""
    return history.committed if isinstance(history, DraftedHistory) else len(history)


@dataclass
class Decision:
    """The next call (``None`` = done), or an unusable call the model wrote, with its token counts."""

    call: ToolCall | None
    invalid: InvalidToolCall | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    text: str | None = None
    """Text the model wrote instead of a call (a protocol error in solo mode)."""
    final: dict[str, Any] | None = None
    """The arguments of the ``done`` call that ended the task (e.g. a final answer)."""
    forwards: int | None = None
    """Target-model forwards the answer took, where the endpoint reports them (``agentspec serve --decoder toolspec``)."""
    hint_tokens: int | None = None
    """Of its tokens, those accepted from the speculator's predicted calls (``hint.speculator``)."""
    alternatives: tuple[ToolCall, ...] = ()
    """A speculator's further guesses for the same step, best first after ``call`` (``--spec-width``)."""


@runtime_checkable
class Policy(Protocol):
    """Decides the next call from the history: your own agent is any object with this one method.

    ``history`` holds the committed steps so far (each a call and what it answered); return
    ``Decision(call=ToolCall(...))`` for the next call, or ``Decision(call=None, final={"answer": ...})`` to finish.
    Simulated model time is a wrapper (:class:`~agentspec.runtime.simulated.SimulatedLatency`), not part of a policy."""

    async def decide(self, history: History) -> Decision: ...


@runtime_checkable
class TakesHints(Protocol):
    """A policy whose running decision can still take predicted calls as draft hints (:meth:`LLMPolicy.hint`)."""

    def deciding(self, steps: int) -> bool:
        """Whether the decision after ``steps`` committed steps is running and can take hints."""
        ...

    async def hint(self, calls: Sequence[ToolCall], steps: int) -> bool:
        """Give ``calls``, predicted for the decision after ``steps`` committed steps, to that decision if it is
        running; whether they were taken."""
        ...

