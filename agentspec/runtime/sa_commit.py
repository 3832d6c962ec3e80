"""SA's commit: the authority's call equals a draft the speculator guessed, so that draft's fork becomes live with its
observation, and the tool does not run again.

The head draft ``q1`` is confirmed by canonical equality.  With ``spec_width`` K > 1 the speculator's next K-1 ranked
guesses for the head position (``Decision.alternatives``) ran too, each in its own fork of the same parent state, and
an authority call equal to one of them commits that fork instead (the drafts after ``q1`` continued ``q1``'s fork:
they are dropped).  A read-only call may also be answered from any matching finished draft whose fork still equals
live state.  The loop is reached only through :class:`SAHost`; SMC's commit, which follows a confirmed head, is
:mod:`agentspec.runtime.macro_commit`.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from agentspec.runtime.draft import Draft, Source
from agentspec.runtime.draft_chain.drafts import DraftChain
from agentspec.runtime.journal import Journal
from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Effect, ToolCall


class SAHost(Protocol):
    """What SA's commit needs of the executor loop."""

    backend: SnapshotBackend
    metrics: ExecutionMetrics
    chain: DraftChain
    journal: Journal

    def effect(self, name: str) -> Effect:
        """A call's effect as the executor sees it."""
        ...

    async def commit(self, drafts: list[Draft], source: Source, confirmed: ToolCall | None = None, macro_id: str | None = None) -> None:
        """Commit a prefix of the chain atomically (the deepest fork becomes live)."""
        ...

    def spared(self, draft: Draft, *, skipped: bool) -> None:
        """``draft`` was committed: what it spared the authority, for the governor."""
        ...


async def confirmable(host: SAHost, draft: Draft) -> bool:
    """Wait for ``draft``'s tool if it still runs (don't rerun it); whether its fork may become live."""
    if not draft.done.is_set():
        started = anyio.current_time()
        await draft.done.wait()
        host.metrics.observe_tool_wait(anyio.current_time() - started)
    sandbox = draft.sandbox
    return sandbox is not None and draft.observation is not None and host.backend.live_token in sandbox.lineage


async def confirm_head(host: SAHost, call: ToolCall) -> bool:
    """Commit the head draft when it is ``call``; whether it was."""
    first = host.chain.head()
    if first is None or first.call != call or not first.executable or not await confirmable(host, first):
        return False
    await host.commit([first], "sa", call)
    host.metrics.observe_sa_commit(0)
    return True


async def confirm_alternative(host: SAHost, call: ToolCall) -> bool:
    """Commit the fork of the head position's alternative guess equal to ``call`` (``spec_width`` > 1).

    The drafts after the head continued the head's fork, not the alternative's: they are dropped, and
    speculation restarts from the state after the commit."""
    head = host.chain.head()
    ranked = [(rank, alt) for rank, alt in enumerate(head.alternatives, 1) if alt.call == call] if head else []
    if head is None or not ranked:
        return False
    rank, alternative = ranked[0]
    if not await confirmable(host, alternative):
        return False
    head.alternatives.remove(alternative)
    async with host.chain.restarted():
        host.chain.drafts = [alternative]
        await host.commit([alternative], "sa", call)
    host.metrics.observe_sa_commit(rank)
    return True


def reuse_read_only(host: SAHost, call: ToolCall) -> bool:
    """Serve a read-only call from a finished draft whose fork state still equals live state."""
    draft = host.chain.reusable(call) if host.effect(call.name) is Effect.READ_ONLY else None
    if draft is None or draft.observation is None:
        return False
    # Journalled like any commit: a resumed run must count this step, or it re-runs what follows.
    (eid,) = host.journal.intents([call], "reuse")
    host.journal.record([(call, draft.observation.model_copy(update={"call_id": call.id}), eid)], "reuse")
    host.metrics.observe_reuse()
    host.spared(draft, skipped=False)
    return True
