"""The speculation worker: keeps the draft chain ``depth`` deep, asking the speculator for the next call after
the last draft and running it in a fork of the last draft's state; it restarts whenever the chain is reset.
"""

from __future__ import annotations

import anyio
import anyio.abc

from agentspec.errors import SnapshotError
from agentspec.runtime.draft import Draft
from agentspec.runtime.draft_chain.alternatives import drop_alternatives, start_alternatives
from agentspec.runtime.draft_chain.drafts import DraftChain
from agentspec.runtime.governor.panel import propose
from agentspec.runtime.hints import LateHints
from agentspec.runtime.journal import Journal
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.policies.protocol import DraftedHistory, Policy
from agentspec.snapshot import Sandbox


class SpeculationWorker:
    """Extends ``chain`` with the speculator's guesses (:mod:`agentspec.runtime.draft_chain`)."""

    def __init__(self, chain: DraftChain, journal: Journal, speculator: Policy | None, hints: LateHints) -> None:
        self.chain, self.journal, self.speculator, self.hints = chain, journal, speculator, hints
        self.host, self.config = chain.host, chain.config
        self._group: anyio.abc.TaskGroup | None = None
        self._snapshot_failures = 0

    async def work(self, group: anyio.abc.TaskGroup) -> None:
        """Keep the chain ``depth`` deep; restart whenever it is reset (alternatives run in ``group``)."""
        self._group = group
        chain = self.chain
        while True:
            epoch = chain.epoch
            with anyio.CancelScope() as scope:
                chain.scope = scope
                while epoch == chain.epoch and not chain.ended and len(chain.drafts) < self.config.depth:
                    await self._extend(epoch)
            chain.scope = None
            if epoch == chain.epoch and (chain.ended or len(chain.drafts) >= self.config.depth):
                await chain.wake.wait()
            chain.wake = anyio.Event()

    async def _extend(self, epoch: int) -> None:
        try:
            await self._draft_next(epoch)
        finally:
            self.chain.drafted.set()

    async def _draft_next(self, epoch: int) -> None:
        assert self.speculator is not None
        chain = self.chain
        if not await chain.gates.passed(epoch, lambda: chain.epoch, chain.drafts[-1] if chain.drafts else None):
            return
        history = DraftedHistory(self.journal.history(), [(d.call, d.observation) for d in chain.drafts],
                                 chain.drafts[-1].sandbox if chain.drafts else None)
        started = anyio.current_time()
        asking = chain.gates.asking = anyio.Event()
        try:
            proposal = await propose(self.speculator, history)
        finally:
            asking.set()
            chain.gates.asking = None
        decision = proposal.decision
        self.host.metrics.observe_speculator(anyio.current_time() - started)
        self.host.timeline.add("speculator", self.host.since_start(started), self.host.since_start(anyio.current_time()),
                               decision.call.name if decision.call else "done")
        if epoch != chain.epoch:
            return
        if decision.call is None:
            chain.ended = True
            self._authority_turn()
            return
        draft = Draft(decision.call, self.host.effect(decision.call.name), speculator=proposal.name,
                      tokens=decision.output_tokens or estimate_tokens(decision.call.canonical()))
        chain.drafts.append(draft)
        chain.drafted.set()  # the call is known: a draft-first authority may start before its tool is done
        self._authority_turn()
        if len(chain.drafts) == 1 and draft.executable and self._group is not None:
            self.hints.offer(draft.call, history.committed, self._group)
        if not draft.executable:
            chain.ended = True  # never run an external effect speculatively, nor anything after it
            draft.done.set()
            return
        parent = chain.drafts[-2].sandbox if len(chain.drafts) > 1 else None
        start_alternatives(self.host, self._group, self.config.spec_width, draft, decision.alternatives, parent)
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
            if draft in self.chain.drafts:
                self.chain.drafts.remove(draft)
            with anyio.CancelScope(shield=True):
                await drop_alternatives(self.host, draft)
            self._snapshot_failures += 1
            self.host.metrics.observe_snapshot_failure()
            self.chain.ended = self._snapshot_failures >= 3
        else:
            self._snapshot_failures = 0
        finally:
            draft.done.set()

    def _authority_turn(self) -> None:
        """Draft-first: a guess is in (or the chain ended), so the speculator pauses until the authority decided.
        Taken here, when the guess lands, not when the authority wakes: the speculator must not slip in between."""
        if self.config.draft_first:
            self.chain.gates.turn = anyio.Event()

