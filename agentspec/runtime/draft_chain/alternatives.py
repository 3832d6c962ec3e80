"""Alternatives (``spec_width`` > 1): the speculator's further ranked guesses for a draft's position, each run in
its own fork of the draft's parent state, so the authority's call may match one of them instead of the draft.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.abc

from agentspec.errors import SnapshotError
from agentspec.runtime.draft import Draft
from agentspec.runtime.draft_chain.host import ChainHost
from agentspec.runtime.latency import estimate_tokens
from agentspec.snapshot import Sandbox
from agentspec.types import Effect, ToolCall


def start_alternatives(host: ChainHost, group: anyio.abc.TaskGroup | None, width: int, draft: Draft,
                       guesses: Sequence[ToolCall], parent: Sandbox | None) -> None:
    """Run the speculator's next ``width - 1`` guesses for ``draft``'s position, each in its own fork of
    ``parent`` (None: live state), beside the draft, in ``group``.  External ones never run (nor count)."""
    if width < 2 or group is None:
        return
    seen = [draft.call]
    for call in guesses:
        if len(draft.alternatives) >= width - 1:
            break
        if call in seen or host.effect(call.name) is Effect.EXTERNAL:
            continue
        seen.append(call)
        alternative = Draft(call, host.effect(call.name), speculator=draft.speculator,
                            tokens=estimate_tokens(call.canonical()), scope=anyio.CancelScope())
        draft.alternatives.append(alternative)
        group.start_soon(_run_alternative, host, alternative, parent)


async def _run_alternative(host: ChainHost, alternative: Draft, parent: Sandbox | None) -> None:
    assert alternative.scope is not None
    with alternative.scope:
        try:
            snapshot = await host.backend.snapshot(parent)
            alternative.sandbox = await host.backend.fork(snapshot)
            host.metrics.observe_speculative_run(alternative=True)
            alternative.started = anyio.current_time()
            alternative.observation = await host.run_tool(alternative.sandbox.execute, alternative.call,
                                                          "speculator-tool")
            alternative.finished = anyio.current_time()
        except SnapshotError:
            pass  # the parent fork went away: this guess can no longer be committed
        finally:
            alternative.done.set()


async def drop_alternatives(host: ChainHost, draft: Draft) -> None:
    """Stop and discard ``draft``'s alternatives, counted as waste (call shielded)."""
    alternatives, draft.alternatives = draft.alternatives, []
    for alternative in alternatives:
        if alternative.scope is not None:
            alternative.scope.cancel()
        await alternative.done.wait()
        host.metrics.observe_discarded(alternative.tokens, ran=alternative.sandbox is not None)
        if alternative.sandbox is not None:
            await host.backend.discard(alternative.sandbox)
