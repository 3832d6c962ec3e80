"""Several speculators asked as one, in turn, under the governor: who guessed, who abstained, and how each one's
predicted ends fared once the task is over.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.policies.protocol import Decision, History, Policy


@dataclass(frozen=True)
class Proposal:
    """A speculator's decision and which speculator made it (None: an unnamed policy)."""

    name: str | None
    decision: Decision


@runtime_checkable
class MayAbstain(Protocol):
    """A speculator that can say it has no guess (the learned one, where no rule or n-gram applies)."""

    async def guess(self, history: History) -> Decision | None:
        """Its decision, or None where it has no guess; ``Decision(call=None)`` predicts the end."""
        ...


def abstains(decision: Decision | None) -> bool:
    """No guess: none given, or an answer that is neither a call nor an end (text, an unusable call).  A bare
    ``Decision(call=None)`` (or one with ``final``) is a guess too: "the task is done"."""
    return decision is None or (decision.call is None and decision.final is None
                                and (decision.invalid is not None or decision.text is not None))


@dataclass
class MemberCounts:
    """What one panel member answered: calls, predicted ends, abstentions; and how its ends fared
    (:meth:`SpeculatorPanel.score_ends`)."""

    calls: int = 0
    ends: int = 0
    abstained: int = 0
    ends_right: int = 0
    ends_wrong: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a run's records hold them (``execution.metrics.speculators``)."""
        return asdict(self)


class SpeculatorPanel:
    """Several speculators as one: each asked in turn (skipping those the governor paused) until one guesses.
    A guess is a call or a predicted end ("the task is done": it ends the draft chain, and is right when the
    authority ends there, wrong otherwise); only an abstention (no guess, see :func:`abstains`) passes the turn
    to the next.  With every speculator paused or abstaining, the answer is "no call"."""

    def __init__(self, members: Sequence[tuple[str, Policy]], governor: Governor | None = None) -> None:
        self.members = list(members)
        self.governor = governor
        self.counts = {name: MemberCounts() for name, _ in self.members}
        self._ends: list[tuple[str, list[Any]]] = []
        """Each predicted end: who made it and the calls it predicts the task ends after (committed + drafts)."""

    async def propose(self, history: History) -> Proposal:
        for name, policy in self.members:
            if self.governor is not None and not self.governor.active(name):
                continue
            with self.governor.speculating(name) if self.governor is not None else nullcontext():
                decision = await policy.guess(history) if isinstance(policy, MayAbstain) else await policy.decide(history)
            counts = self.counts[name]
            if decision is None or abstains(decision):
                counts.abstained += 1
                continue
            if decision.call is None:
                counts.ends += 1
                self._ends.append((name, [call for call, _ in history]))
            else:
                counts.calls += 1
            return Proposal(name, decision)
        return Proposal(None, Decision(call=None))

    async def decide(self, history: History) -> Decision:
        return (await self.propose(history)).decision

    def score_ends(self, committed: Sequence[Any]) -> dict[str, MemberCounts]:
        """Score the predicted ends against the task's ``committed`` calls once it is over: an end is right when
        the task ended exactly after the calls it was predicted after, wrong otherwise (the authority went on, or
        the drafts it stood on were not what the authority did).  Returns :attr:`counts`; scores each end once."""
        for name, before in self._ends:
            right = list(committed) == before
            self.counts[name].ends_right += int(right)
            self.counts[name].ends_wrong += int(not right)
        self._ends = []
        return self.counts


async def propose(speculator: Policy, history: History) -> Proposal:
    """The speculator's next guess, named by who made it when ``speculator`` is a :class:`SpeculatorPanel`."""
    if isinstance(speculator, SpeculatorPanel):
        return await speculator.propose(history)
    return Proposal(None, await speculator.decide(history))


def panel_counts(speculator: Policy | None, committed: Sequence[Any]) -> dict[str, dict[str, int]] | None:
    """Once a task is over, its panel's counts per member with the predicted ends scored against the task's
    ``committed`` calls (:meth:`SpeculatorPanel.score_ends`); None unless ``speculator`` is a panel of two or more
    (a single speculator, governed or not, has nobody to share its turns with)."""
    if not isinstance(speculator, SpeculatorPanel) or len(speculator.members) < 2:
        return None
    return {name: counts.as_dict() for name, counts in speculator.score_ends(committed).items()}


@runtime_checkable
class LooksAhead(Protocol):
    """A speculator that runs read-only calls in forks before it guesses (the learned speculator's look-ahead)."""

    lookahead_calls: int
    lookahead_batches: int


def lookahead_counts(speculator: Policy | None) -> tuple[int, int]:
    """Look-ahead calls and batches ``speculator`` ran (summed over a panel's members; 0, 0 for others)."""
    members: list[object] = [p for _, p in speculator.members] if isinstance(speculator, SpeculatorPanel) else [speculator]
    calls = batches = 0
    for member in members:
        if isinstance(member, LooksAhead):
            calls, batches = calls + member.lookahead_calls, batches + member.lookahead_batches
    return calls, batches
