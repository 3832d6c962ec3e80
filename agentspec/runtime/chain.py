"""The draft chain and the speculation worker that keeps it ``depth`` deep.

The speculator proposes the calls after the committed history, q1..qD, and each runs in its own fork of the live
state (a draft's fork continues the previous draft's).  With ``spec_width`` K > 1 each position's next K-1 ranked
guesses (``Decision.alternatives``) run too, each in its own fork of the same parent state.  The chain is reset
(model requests and tool work cancelled for real, forks discarded, waste counted) whenever live state moves past
it; the worker then restarts from the new state.  External effects are never drafted past.

The chain commits nothing: :class:`~agentspec.runtime.executor.ExecutionLoop` decides which drafts commit and
tells the chain (:meth:`DraftChain.advance`).  Its gates let the loop's wait policies pause the worker:
``live_gate`` while a live call runs, ``turn`` while a draft-first authority decides, ``hold`` while the governor
times a decision without speculation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

import anyio
import anyio.abc

from agentspec.errors import SnapshotError
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.draft import Draft
from agentspec.runtime.governor import propose
from agentspec.runtime.hints import LateHints
from agentspec.runtime.journal import Journal
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.policies import DraftedHistory, Policy
from agentspec.snapshot import Sandbox, SnapshotBackend
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


class DraftChain:
    """The speculator's drafts ahead of the committed history, head first (see module docstring)."""

    def __init__(self, host: ChainHost, journal: Journal, speculator: Policy | None, config: ExecutorConfig,
                 hints: LateHints) -> None:
        self.host, self.journal, self.speculator, self.config, self.hints = host, journal, speculator, config, hints
        self.drafts: list[Draft] = []
        self.ended = False
        """The speculator said done, or drafted an external call: nothing more is drafted until a reset."""
        self._epoch = 0
        self._wake = anyio.Event()
        self._drafted = anyio.Event()
        """Set whenever a draft finishes or the chain ends (see :meth:`settled`)."""
        self._scope: anyio.CancelScope | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._snapshot_failures = 0
        self.live_gate: anyio.Event | None = None
        """Unset while a live call runs: the worker restarts from the state after it."""
        self.turn: anyio.Event | None = None
        """Draft-first: unset from the moment the speculator's guess is in until the authority has decided on it
        (the speculator waits: the authority has the cores)."""
        self.hold: anyio.Event | None = None
        """Unset while the governor wants this authority decision without speculation (a baseline sample)."""
        self.asking: anyio.Event | None = None
        """Unset while the speculator answers a request."""

    def head(self) -> Draft | None:
        """The first draft (the next call the speculator predicts), if any."""
        return self.drafts[0] if self.drafts else None

    def advance(self, committed: int) -> None:
        """The first ``committed`` drafts became live: the worker extends the chain from there."""
        del self.drafts[:committed]
        self._wake.set()

    # -- waiting on the chain (the loop's wait policies) ---------------------------------------------------------

    async def settled(self) -> None:
        """Wait until the chain is ``depth`` deep or ended, with every draft's tool done."""
        while True:
            self._drafted = anyio.Event()
            full = self.ended or len(self.drafts) >= self.config.depth
            if full and all(d.done.is_set() for d in self.drafts):
                return
            await self._drafted.wait()

    async def head_predicted(self) -> None:
        """Wait until the chain has a head (its tool may still run) or has ended."""
        while True:
            self._drafted = anyio.Event()
            if self.drafts or self.ended:
                return
            await self._drafted.wait()

    @asynccontextmanager
    async def restarted(self) -> AsyncIterator[None]:
        """Reset the chain and hold the worker while the body changes live state: speculation restarts from the
        state after it."""
        gate = self.live_gate = anyio.Event()
        try:
            await self.reset(count_waste=True)
            yield
        finally:
            self.live_gate = None
            gate.set()

    def reusable(self, call: ToolCall) -> Draft | None:
        """A finished draft equal to the read-only ``call`` whose fork state still equals live state."""
        for draft in self.drafts:
            if not draft.done.is_set() or draft.sandbox is None or draft.observation is None:
                return None
            if draft.call == call and self.host.backend.live_token in draft.sandbox.lineage:
                return draft
            if draft.effect is not Effect.READ_ONLY:
                return None  # later drafts saw state this one changed
        return None

    # -- the speculation worker -------------------------------------------------------------------------------

    async def work(self, group: anyio.abc.TaskGroup) -> None:
        """Keep the chain ``depth`` deep; restart whenever it is reset (alternatives run in ``group``)."""
        self._group = group
        while True:
            epoch = self._epoch
            with anyio.CancelScope() as scope:
                self._scope = scope
                while epoch == self._epoch and not self.ended and len(self.drafts) < self.config.depth:
                    await self._extend(epoch)
            self._scope = None
            if epoch == self._epoch and (self.ended or len(self.drafts) >= self.config.depth):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _extend(self, epoch: int) -> None:
        try:
            await self._draft_next(epoch)
        finally:
            self._drafted.set()

    async def _gates_passed(self, epoch: int) -> bool:
        """Wait out whatever pauses the worker; False when the chain was reset meanwhile (restart from there)."""
        if self.live_gate is not None:
            await self.live_gate.wait()
            return False  # the epoch moved on: let the worker loop restart from the new state
        if self.drafts and not self.drafts[-1].done.is_set():
            await self.drafts[-1].done.wait()
        if self.turn is not None:
            await self.turn.wait()  # draft-first: the authority is deciding on the last guess
            if epoch != self._epoch:
                return False
        if self.hold is not None:
            await self.hold.wait()  # the governor times this authority decision without speculation
            if epoch != self._epoch:
                return False
        return True

    async def _draft_next(self, epoch: int) -> None:
        assert self.speculator is not None
        if not await self._gates_passed(epoch):
            return
        history = DraftedHistory(self.journal.history(), [(d.call, d.observation) for d in self.drafts],
                                 self.drafts[-1].sandbox if self.drafts else None)
        started = anyio.current_time()
        asking = self.asking = anyio.Event()
        try:
            proposal = await propose(self.speculator, history)
        finally:
            asking.set()
            self.asking = None
        decision = proposal.decision
        self.host.metrics.observe_speculator(anyio.current_time() - started)
        self.host.timeline.add("speculator", self.host.since_start(started), self.host.since_start(anyio.current_time()),
                               decision.call.name if decision.call else "done")
        if epoch != self._epoch:
            return
        if decision.call is None:
            self.ended = True
            self._authority_turn()
            return
        draft = Draft(decision.call, self.host.effect(decision.call.name), speculator=proposal.name,
                      tokens=decision.output_tokens or estimate_tokens(decision.call.canonical()))
        self.drafts.append(draft)
        self._drafted.set()  # the call is known: a draft-first authority may start before its tool is done
        self._authority_turn()
        if len(self.drafts) == 1 and draft.executable and self._group is not None:
            self.hints.offer(draft.call, history.committed, self._group)
        if not draft.executable:
            self.ended = True  # never run an external effect speculatively, nor anything after it
            draft.done.set()
            return
        parent = self.drafts[-2].sandbox if len(self.drafts) > 1 else None
        self._start_alternatives(draft, decision.alternatives, parent)
        await self._run_draft(draft, parent)

    async def _run_draft(self, draft: Draft, parent: Sandbox | None) -> None:
        try:
            snapshot = await self.host.backend.snapshot(parent)
            draft.sandbox = await self.host.backend.fork(snapshot)
            self.host.metrics.observe_speculative_run(alternative=False)
            draft.started = anyio.current_time()
            draft.observation = await self.host.run_tool(draft.sandbox.execute, draft.call, "speculator-tool")
            draft.finished = anyio.current_time()
        except SnapshotError:
            # The parent fork went away (committed or discarded meanwhile): drop this draft and retry
            # from the new state, unless the backend keeps failing.
            if draft in self.drafts:
                self.drafts.remove(draft)
            with anyio.CancelScope(shield=True):
                await self.drop_alternatives(draft)
            self._snapshot_failures += 1
            self.host.metrics.observe_snapshot_failure()
            self.ended = self._snapshot_failures >= 3
        else:
            self._snapshot_failures = 0
        finally:
            draft.done.set()

    def _authority_turn(self) -> None:
        """Draft-first: a guess is in (or the chain ended), so the speculator pauses until the authority decided.
        Taken here, when the guess lands, not when the authority wakes: the speculator must not slip in between."""
        if self.config.draft_first:
            self.turn = anyio.Event()

    # -- alternatives (spec_width > 1) --------------------------------------------------------------------------

    def _start_alternatives(self, draft: Draft, guesses: Sequence[ToolCall], parent: Sandbox | None) -> None:
        """Run the speculator's next ``spec_width - 1`` guesses for ``draft``'s position, each in its own fork of
        ``parent`` (None: live state), beside the draft.  External ones never run (nor count)."""
        if self.config.spec_width < 2 or self._group is None:
            return
        seen = [draft.call]
        for call in guesses:
            if len(draft.alternatives) >= self.config.spec_width - 1:
                break
            if call in seen or self.host.effect(call.name) is Effect.EXTERNAL:
                continue
            seen.append(call)
            alternative = Draft(call, self.host.effect(call.name), speculator=draft.speculator,
                                tokens=estimate_tokens(call.canonical()), scope=anyio.CancelScope())
            draft.alternatives.append(alternative)
            self._group.start_soon(self._run_alternative, alternative, parent)

    async def _run_alternative(self, alternative: Draft, parent: Sandbox | None) -> None:
        assert alternative.scope is not None
        with alternative.scope:
            try:
                snapshot = await self.host.backend.snapshot(parent)
                alternative.sandbox = await self.host.backend.fork(snapshot)
                self.host.metrics.observe_speculative_run(alternative=True)
                alternative.started = anyio.current_time()
                alternative.observation = await self.host.run_tool(alternative.sandbox.execute, alternative.call,
                                                                   "speculator-tool")
                alternative.finished = anyio.current_time()
            except SnapshotError:
                pass  # the parent fork went away: this guess can no longer be committed
            finally:
                alternative.done.set()

    async def drop_alternatives(self, draft: Draft) -> None:
        """Stop and discard ``draft``'s alternatives, counted as waste (call shielded)."""
        alternatives, draft.alternatives = draft.alternatives, []
        for alternative in alternatives:
            if alternative.scope is not None:
                alternative.scope.cancel()
            await alternative.done.wait()
            self.host.metrics.observe_discarded(alternative.tokens, ran=alternative.sandbox is not None)
            if alternative.sandbox is not None:
                await self.host.backend.discard(alternative.sandbox)

    async def retire(self, committed: list[Draft]) -> None:
        """After a commit: stop ``committed``'s alternatives (their position is decided) and discard the forks
        below the deepest (it became live)."""
        with anyio.CancelScope(shield=True):
            for draft in committed:
                await self.drop_alternatives(draft)
        for draft in committed[:-1]:
            if draft.sandbox is not None:
                await self.host.backend.discard(draft.sandbox)

    # -- reset -----------------------------------------------------------------------------------------------

    async def reset(self, count_waste: bool) -> None:
        """Drop every draft: cancel in-flight work, discard forks, count the waste."""
        self._epoch += 1
        if self._scope is not None:
            self._scope.cancel()
        drafts, self.drafts = self.drafts, []
        self.ended = False
        with anyio.CancelScope(shield=True):
            for draft in drafts:
                await self.drop_alternatives(draft)
                if count_waste:
                    self.host.metrics.observe_discarded(draft.tokens, ran=draft.sandbox is not None)
                if draft.sandbox is not None:
                    await self.host.backend.discard(draft.sandbox)
                draft.done.set()
        self._wake.set()
        self._drafted.set()
