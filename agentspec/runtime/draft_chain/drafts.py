"""The draft chain's state: the drafts ahead of the committed history, head first, and what the loop asks of them
(the head, a reusable read-only draft, waiting for the chain, advancing it after a commit, resetting it).

The chain commits nothing and drafts nothing itself: the loop decides what commits, the worker
(:mod:`agentspec.runtime.draft_chain.worker`) extends the chain.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.draft import Draft
from agentspec.runtime.draft_chain.alternatives import drop_alternatives
from agentspec.runtime.draft_chain.gates import Gates
from agentspec.runtime.draft_chain.host import ChainHost
from agentspec.types import Effect, ToolCall


class DraftChain:
    """The speculator's drafts ahead of the committed history, head first (:mod:`agentspec.runtime.draft_chain`)."""

    def __init__(self, host: ChainHost, config: ExecutorConfig) -> None:
        self.host, self.config = host, config
        self.drafts: list[Draft] = []
        self.ended = False
        """The speculator said done, or drafted an external call: nothing more is drafted until a reset."""
        self.gates = Gates()
        self.epoch = 0
        """Bumped by every reset: what the worker began in an older epoch is stale."""
        self.wake = anyio.Event()
        """Set when the worker, resting on a full or ended chain, must look again (an advance, a reset)."""
        self.drafted = anyio.Event()
        """Set whenever a draft finishes or the chain ends (see :meth:`settled`)."""
        self.scope: anyio.CancelScope | None = None
        """The worker's extension in progress, cancelled by a reset."""

    def head(self) -> Draft | None:
        """The first draft (the next call the speculator predicts), if any."""
        return self.drafts[0] if self.drafts else None

    def advance(self, committed: int) -> None:
        """The first ``committed`` drafts became live: the worker extends the chain from there."""
        del self.drafts[:committed]
        self.wake.set()

    # -- waiting on the chain (the loop's wait policies) ---------------------------------------------------------

    async def settled(self) -> None:
        """Wait until the chain is ``depth`` deep or ended, with every draft's tool done."""
        while True:
            self.drafted = anyio.Event()
            full = self.ended or len(self.drafts) >= self.config.depth
            if full and all(d.done.is_set() for d in self.drafts):
                return
            await self.drafted.wait()

    async def head_predicted(self) -> None:
        """Wait until the chain has a head (its tool may still run) or has ended."""
        while True:
            self.drafted = anyio.Event()
            if self.drafts or self.ended:
                return
            await self.drafted.wait()

    @asynccontextmanager
    async def restarted(self) -> AsyncIterator[None]:
        """Reset the chain and hold the worker while the body changes live state: speculation restarts from the
        state after it."""
        gate = self.gates.live_gate = anyio.Event()
        try:
            await self.reset(count_waste=True)
            yield
        finally:
            self.gates.live_gate = None
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

    async def retire(self, committed: list[Draft]) -> None:
        """After a commit: stop ``committed``'s alternatives (their position is decided) and discard the forks
        below the deepest (it became live)."""
        with anyio.CancelScope(shield=True):
            for draft in committed:
                await drop_alternatives(self.host, draft)
        for draft in committed[:-1]:
            if draft.sandbox is not None:
                await self.host.backend.discard(draft.sandbox)

    # -- reset -----------------------------------------------------------------------------------------------

    async def reset(self, count_waste: bool) -> None:
        """Drop every draft: cancel in-flight work, discard forks, count the waste."""
        self.epoch += 1
        if self.scope is not None:
            self.scope.cancel()
        drafts, self.drafts = self.drafts, []
        self.ended = False
        with anyio.CancelScope(shield=True):
            for draft in drafts:
                await drop_alternatives(self.host, draft)
                if count_waste:
                    self.host.metrics.observe_discarded(draft.tokens, ran=draft.sandbox is not None)
                if draft.sandbox is not None:
                    await self.host.backend.discard(draft.sandbox)
                draft.done.set()
        self.wake.set()
        self.drafted.set()
