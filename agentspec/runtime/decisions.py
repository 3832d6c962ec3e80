"""Who speaks next: the authority's decisions under the run's wait policy, and the user's turns.

:class:`Decider` asks the authority for each next call.  Before asking it may wait on the draft chain (the wait
policies: ``speculate_first`` waits for the whole chain, ``draft_first`` for its head), and under a governor it
may hold speculation for a decision timed alone (a baseline sample).  The speculator's head guess rides along as a
draft hint for the authority's decoder; with SPORK the decision streams and is probed.

:class:`UserTurns` plays the user's side of a conversation on live state when the agent messages them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc

from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.conversation import SAY, User, conversation, turn_observation
from agentspec.runtime.draft_chain.drafts import DraftChain
from agentspec.runtime.governor.evidence import stratum_of
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.journal import Journal
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.policies.protocol import Decision, Policy, PredictedHistory
from agentspec.runtime.spork import Spork
from agentspec.snapshot import SnapshotBackend
from agentspec.types import InvalidToolCall, Observation, TerminationReason, ToolCall


class Clocked(Protocol):
    """The loop's books and clock, as the decisions and turns write to them."""

    backend: SnapshotBackend
    metrics: ExecutionMetrics
    timeline: Timeline

    def since_start(self, at: float) -> float:
        ...

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        ...


class Decider:
    """Asks the authority for the next call after the committed history (see module docstring)."""

    def __init__(self, host: Clocked, authority: Policy, chain: DraftChain, journal: Journal, config: ExecutorConfig,
                 governor: Governor | None, spork: Spork | None) -> None:
        self.host, self.authority, self.chain, self.journal = host, authority, chain, journal
        self.config, self.governor, self.spork = config, governor, spork
        self.decided_at = 0.0
        """Clock time the last decision came (what a draft's tool ran before it was spared)."""

    async def decide(self, group: anyio.abc.TaskGroup) -> Decision:
        """The authority's next decision, timed and counted (``group``: where SPORK's dispatches run)."""
        speculating = self.config.mode != "sequential"
        if speculating:
            await self._wait_for_guess()
        stratum = stratum_of(len(self.journal.history()))
        if self.governor is not None and speculating and self.governor.hold(stratum):
            self.chain.gates.hold = anyio.Event()  # no new speculator request until this decision is made...
            if self.chain.gates.asking is not None:
                await self.chain.gates.asking.wait()  # ...and none in flight when it starts: a baseline sample
        mark = self.governor.mark() if self.governor is not None else None
        started = anyio.current_time()
        head = self.chain.head()
        # The speculator's next call rides along as a draft hint for the authority's decoder (never a decision).
        history = PredictedHistory(self.journal.history(), [head.call] if head is not None and head.executable else [])
        try:
            if self.spork is not None:
                decision = await self.spork.decide(self.authority, history, group)
            else:
                decision = await self.authority.decide(history)
        finally:
            if self.chain.gates.turn is not None:
                self.chain.gates.turn.set()  # draft-first: the speculator's turn again
            if self.chain.gates.hold is not None:
                self.chain.gates.hold.set()
                self.chain.gates.hold = None
        if self.governor is not None and mark is not None:
            called = decision.call is not None and decision.call.name != SAY
            self.governor.observe_decision(mark, stratum, tool_call=called)
        ended = self.decided_at = anyio.current_time()
        self.host.metrics.observe_decision(ended - started, decision.forwards, decision.hint_tokens)
        label = decision.call.name if decision.call else "done"
        self.host.timeline.add("authority", self.host.since_start(started), self.host.since_start(ended), label)
        return decision

    async def _wait_for_guess(self) -> None:
        """The wait policy: the whole chain (recording runs), its head (draft-first), or nothing."""
        waited = anyio.current_time()
        wait_mark = self.governor.mark() if self.governor is not None else None
        if self.config.speculate_first:
            await self.chain.settled()
        elif self.config.draft_first:
            await self.chain.head_predicted()
        self.host.metrics.observe_draft_wait(anyio.current_time() - waited)
        if self.governor is not None and wait_mark is not None:
            self.governor.observe_wait(wait_mark)


class UserTurns:
    """The user's side: each agent message to the user is delivered and answered on live state."""

    def __init__(self, host: Clocked, user: User, journal: Journal) -> None:
        self.host, self.user, self.journal = host, user, journal
        self.ended: TerminationReason | None = None
        """Set once the user stopped (or failed): the conversation is over."""

    async def play(self, call: ToolCall) -> Observation:
        """Deliver the agent's message ``call`` and play the user's turn (their tool calls, then their reply)."""
        started = anyio.current_time()
        said = conversation([*self.journal.history(), (call, None)])
        backend = self.host.backend
        turn = await self.user.reply(said, lambda c: self.host.run_tool(lambda u: backend.execute(u, "user"), c, "user-tool"))
        self.host.timeline.add("user", self.host.since_start(started), self.host.since_start(anyio.current_time()), "reply")
        if turn.stop or turn.error:
            self.ended = TerminationReason.USER_ERROR if turn.error else TerminationReason.USER_STOP
        self.journal.errors += sum(int(m.error) for m in turn.messages if m.role == "tool")
        return turn_observation(call, turn)


def invalid_step(bad: InvalidToolCall) -> tuple[ToolCall, Observation]:
    """The step an invalid call commits: the call as named, and an error observation that tells the model why."""
    content = f"Error: the arguments of {bad.name!r} are not a valid JSON object ({bad.error})"
    call = ToolCall(name=bad.name or "invalid", arguments={}, id=bad.id)
    return call, Observation(call_id=bad.id, name=bad.name, content=content, error=True)
