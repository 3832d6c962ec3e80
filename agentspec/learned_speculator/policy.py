"""The learned speculator as a :class:`~agentspec.runtime.policies.protocol.Policy`: ranked guesses in microseconds.

    speculator = LearnedSpeculator(load("runs/spec.json").model, text=task_text)
    decision = await speculator.decide(history)      # decision.call, then decision.alternatives

With a :class:`~agentspec.learned_speculator.lookahead.Lookahead` it first runs the fitted probes in a fork of the
current state: live for a history of committed steps, a fork of the history's ``state`` where a
:class:`~agentspec.runtime.policies.protocol.DraftedHistory` names one (the last draft's fork in a run, a sample's fork while
mining).  ``lookahead_cap`` (default: the artifact's) bounds the look-ahead calls of one prediction.  On a virtual clock (``charge_time``) each
prediction takes :data:`PREDICT_COST_S` there, so a run's timing includes what the speculator costs and two identical
runs give identical timings (its measured time would differ from run to run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

from agentspec.errors import SnapshotError
from agentspec.learned_speculator.lookahead import Lookahead, ProbeRun, run_probes
from agentspec.learned_speculator.model import Guess, SpeculatorModel
from agentspec.learned_speculator.sources import Context
from agentspec.runtime.conversation import SAY
from agentspec.runtime.policies.protocol import Decision, DraftedHistory, History, committed_steps

PREDICT_COST_S = 0.001
"""What one prediction costs on a virtual clock: about the measured median with look-ahead (``predict_s`` keeps the
real times)."""


@dataclass
class LearnedSpeculator:
    """Guesses the next call from a fitted :class:`SpeculatorModel` (``width``: guesses per decision)."""

    model: SpeculatorModel
    text: str
    lookahead: Lookahead | None = None
    width: int = 3
    charge_time: bool = False
    """Sleep :data:`PREDICT_COST_S` per prediction on the clock (a virtual clock would otherwise count it as free)."""
    lookahead_cap: int | None = None
    """At most this many look-ahead calls per prediction (None: the artifact's ``lookahead_cap``, else all)."""
    tools: frozenset[str] | None = None
    """The tools the agent has (normal mode: not the user's): the only ones a guess names (None: any)."""
    predict_s: list[float] = field(default_factory=list)
    """Every prediction's measured time (look-ahead calls not included)."""
    lookahead_calls: int = 0
    """Look-ahead calls its predictions ran."""
    capped: int = 0
    """Predictions whose look-ahead the cap cut short (probes left unrun)."""
    lookahead_batches: int = 0
    """Batches (tool latencies) its look-ahead took."""
    _earlier: dict[str, str] = field(default_factory=dict, repr=False)
    """The last look-ahead's observations: chained probes whose inputs they hold run in the first batch
    (:func:`~agentspec.learned_speculator.lookahead.run_probes`), which saves a batch while those inputs stay the same."""

    def look_through(self, lookahead: Lookahead) -> None:
        """Look ahead through ``lookahead`` from now on (a run's episode backend, a mining sample's fork)."""
        self.lookahead = lookahead

    @property
    def cap(self) -> int | None:
        """The look-ahead cap in force."""
        return self.lookahead_cap if self.lookahead_cap is not None else self.model.lookahead_cap

    async def decide(self, history: History) -> Decision:
        guesses = await self.guesses(history)
        head = guesses[0].call if guesses else None
        alternatives = tuple(g.call for g in guesses[1:] if g.call is not None)
        return Decision(call=head, alternatives=alternatives)

    async def guess(self, history: History) -> Decision | None:
        """:meth:`decide`, or None where it abstains (no guess at all); ``Decision(call=None)`` is a predicted
        end: "the task is over" (:class:`~agentspec.runtime.governor.panel.SpeculatorPanel` asks the next speculator
        only where this one abstains)."""
        guesses = await self.guesses(history)
        if not guesses:
            return None
        return Decision(call=guesses[0].call, alternatives=tuple(g.call for g in guesses[1:] if g.call is not None))

    async def guesses(self, history: History) -> list[Guess]:
        """Up to ``width`` ranked guesses after ``history`` (look-ahead first, where it has one), among
        :attr:`tools` when given.  A message to the user (normal mode) is no call of the agent's own history, as
        the fit saw it (a recording's agent view): the guesses read the history without them."""
        seen = await self._look(history)
        started = time.perf_counter()
        own = [step for step in history if step[0].name != SAY]
        guesses = self.model.predict(self.text, own, seen, k=self.width, tools=self.tools)
        spent = time.perf_counter() - started
        self.predict_s.append(spent)
        if self.charge_time:
            await anyio.sleep(PREDICT_COST_S)
        return guesses

    async def _look(self, history: History) -> dict[str, str] | None:
        """The probes' observations at ``history``'s state: live for a committed history, the last draft's fork
        for a draft chain (None, no look-ahead, when that fork is unknown or gone)."""
        if self.lookahead is None or not self.model.probes:
            return None
        look: Lookahead = self.lookahead
        state = history.state if isinstance(history, DraftedHistory) else None
        if state is not None or committed_steps(history) != len(history):
            at = getattr(self.lookahead, "at", None)
            if state is None or at is None:
                return None
            look = at(state)
        context = Context(self.text, history, {}, self.model.typed)
        budget = ProbeRun(cap=self.cap)
        try:
            seen = await run_probes(self.model.probes, context, look, budget, self._earlier)
        except SnapshotError:
            return None  # the draft was committed or dropped meanwhile: guess from the history alone
        finally:
            self.lookahead_calls += budget.calls
            self.lookahead_batches += budget.batches
            self.capped += int(budget.capped)
        self._earlier = seen
        return seen
