"""SMC's commit: after the authority confirms a macro's anchor, commit the drafts the macro predicts.

A library macro fires when its first ``j`` steps align with the end of the committed history and its remaining
steps align with the next drafts of the chain (slots bound consistently across both), it skips at least
``l_min`` authority decisions, and the deepest of those drafts' forks still descends from live state.  Among
the macros that fire, the one skipping most wins, then the one with the higher reliability bound.

With ``--macro-commit verified`` (the default where the authority can verify, :mod:`agentspec.runtime.chain_verification`)
the fired macro's drafts are a draft at the action level: the authority verifies the chain (the drafts' calls and
their forks' observations) in one request, and only the accepted prefix commits; the rest stay drafts, for the next
decision to confirm or reject as in SA.  A verification accepting nothing commits nothing.  ``trusted`` is the
paper's lossy commit.

The loop is reached only through :class:`MacroHost`, which :class:`~agentspec.runtime.executor.ExecutionLoop`
implements; SA's commit of a confirmed first draft is :mod:`agentspec.runtime.sa_commit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import anyio

from agentspec.macros import Macro, MacroLibrary, align
from agentspec.runtime.chain_verification import ChainVerdict, VerifiesChains
from agentspec.runtime.draft import Draft, Source
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.simulated import untimed
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Step, ToolCall


class MacroHost(Protocol):
    """What SMC's commit needs of the executor loop."""

    backend: SnapshotBackend
    authority: Policy
    governor: Governor | None
    """The mode's governor, which may pause verified macro commits that cost more than they save."""
    metrics: ExecutionMetrics
    steps: list[Step]
    """The committed history, oldest first."""
    timeline: Timeline

    def since_start(self, at: float) -> float:
        """Seconds from the start of the task to clock time ``at``."""
        ...

    def drafts(self) -> list[Draft]:
        """The draft chain, head first (a copy: the chain itself changes while a commit waits)."""
        ...

    async def commit(self, drafts: list[Draft], source: Source, confirmed: ToolCall | None = None, macro_id: str | None = None) -> None:
        """Commit a prefix of the chain atomically (the deepest fork becomes live)."""
        ...


def best_macro(library: MacroLibrary, history: Sequence[ToolCall], drafted: Sequence[ToolCall], l_min: int) -> tuple[int, Macro] | None:
    """The macro to fire and how many drafts it commits, or None when no active macro aligns."""
    best: tuple[int, float, Macro] | None = None
    for macro in library.active():
        for j in range(1, len(macro.steps)):
            rest = len(macro.steps) - j
            if rest < l_min or j > len(history) or rest > len(drafted):
                continue
            bindings = align(macro.steps[:j], list(history[-j:]))
            if bindings is None or align(macro.steps[j:], list(drafted[:rest]), bindings) is None:
                continue
            if best is None or (rest, macro.lcb) > best[:2]:
                best = (rest, macro.lcb, macro)
    return None if best is None else (best[0], best[2])


def _committable(drafts: list[Draft], live_token: str) -> bool:
    """Every draft ran without error in its fork, and the deepest fork continues live state."""
    usable = all(d.executable and d.sandbox is not None and d.observation is not None and not d.observation.error for d in drafts)
    last = drafts[-1].sandbox
    return usable and last is not None and live_token in last.lineage


async def try_macro(loop: MacroHost, library: MacroLibrary, *, l_min: int, verify: bool, verified: bool = False) -> None:
    """After a confirmed anchor, commit the drafts a reliable macro predicts: all of them (``verified`` False: the
    paper's lossy commit; ``verify`` then asks the authority after), or the prefix the authority verifies."""
    chosen = best_macro(library, [s.call for s in loop.steps], [d.call for d in loop.drafts()], l_min)
    if chosen is None:
        return
    rest, macro = chosen
    drafts = loop.drafts()[:rest]
    for draft in drafts:
        await draft.done.wait()
    if drafts != loop.drafts()[:rest]:
        return  # the chain changed while waiting
    if not _committable(drafts, loop.backend.live_token):
        return
    anchor = len(loop.steps)
    if verified:
        if loop.governor is not None and not loop.governor.verifying():
            return  # verifications have cost this mode more than they saved: SA goes on alone
        verdict = await verify_chain(loop, drafts)
        if drafts != loop.drafts()[:rest]:
            return  # the chain changed while the authority verified it
        if verify:
            macro.observe(verdict.accepted == rest, library.delta)  # the verification is the check: no decisions
            loop.metrics.observe_macro_check(verdict.steps, disagreed=verdict.rejected)
        drafts = drafts[:verdict.accepted]
        if not drafts:
            return
    await loop.commit(drafts, "macro", macro_id=macro.id)
    loop.metrics.observe_macro_firing(len(drafts))
    if verify and not verified:
        await verify_macro(loop, macro, anchor, library.delta)


async def verify_chain(loop: MacroHost, drafts: list[Draft]) -> ChainVerdict:
    """The authority's verdict on ``drafts`` (finished, committable), counted in the metrics and the timeline."""
    authority = loop.authority
    assert isinstance(authority, VerifiesChains)  # the executor verifies only where verification() said it can
    history = [(s.call, s.observation) for s in loop.steps]
    chain = [(d.call, d.observation) for d in drafts if d.observation is not None]
    started = anyio.current_time()
    verdict = await authority.verify_chain(history, chain)
    ended = anyio.current_time()
    loop.metrics.observe_chain_verified(verdict.steps, verdict.accepted, rejected=verdict.rejected,
                                        seconds=ended - started)
    if loop.governor is not None:
        loop.governor.observe_verification(ended - started, verdict.accepted)
    label = f"verify {verdict.accepted}/{verdict.steps}"
    loop.timeline.add("authority", loop.since_start(started), loop.since_start(ended), label, "verify")
    return verdict


async def verify_macro(loop: MacroHost, macro: Macro, first: int, delta: float) -> None:
    """Would the authority have made the macro-committed calls from step ``first`` on?  Updates the macro's
    n, k (online reliability).  Off the critical path: no simulated time."""
    agreed = True
    for index in range(first, len(loop.steps)):
        history = [(s.call, s.observation) for s in loop.steps[:index]]
        decision = await untimed(loop.authority).decide(history)  # a check off the critical path: no simulated time
        loop.metrics.observe_macro_check(1, disagreed=False)
        if decision.call != loop.steps[index].call:
            agreed = False
            break
    macro.observe(agreed, delta)
    loop.metrics.observe_macro_check(0, disagreed=not agreed)
