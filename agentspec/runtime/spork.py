"""SPORK inside the executor: probe while the authority decodes, dispatch early, commit on a match.

:class:`Spork` wraps one authority decision:

1. the authority's request streams; after its first token, and every
   ``probe_every`` tokens while it is still going, a probe is sent (one at a
   time, in its own task: a slow probe never delays the authority);
2. a probe whose call clears the gate (``exp(min logprob)`` >= ``gate``,
   per-tool overrides) and validates against the tool's schema is dispatched
   into a fork of the live state, unless the cost model says it does not pay
   or the tool is ``external``;
3. when the authority's call arrives, an equal dispatched call is committed
   with its observation (no second execution); a different one is discarded
   and its work cancelled for real.

The authority streams if it can (``decide_streaming``): a real model as its
tokens arrive, a simulated one (:class:`~agentspec.runtime.simulated.SimulatedLatency`)
as its simulated decode goes; probes (simulated ones wrapped in
:class:`~agentspec.runtime.simulated.SimulatedProbeLatency`) take their own time.

SPORK reaches the executor loop only through :class:`SporkHost` (commit a
fork, run a tool, read the chain head, the clock), which
:class:`~agentspec.runtime.executor.ExecutionLoop` implements.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentspec.runtime.config import SporkConfig
from agentspec.runtime.cost_model import CostModel
from agentspec.runtime.draft import Draft, Source
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.policies.protocol import Decision, History, Policy
from agentspec.runtime.probe import Prober, ProbeResult, schema_errors
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Effect, Observation, ToolCall

__all__ = ["Spork", "SporkHost"]


class SporkHost(Protocol):
    """What SPORK needs of the executor loop: its live state, its books, and four operations."""

    backend: SnapshotBackend

    def effect(self, name: str) -> Effect:
        """A call's effect as the executor sees it."""
        ...
    metrics: ExecutionMetrics
    timeline: Timeline

    def chain_head(self) -> Draft | None:
        """The speculator's first draft, if any (SPORK does not dispatch what it already runs)."""
        ...

    def since_start(self, at: float) -> float:
        """Seconds from the start of the run to clock time ``at``."""
        ...

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        """Run a call in a fork (``execute``), timed on ``lane`` with the loop's simulated tool latency."""
        ...

    async def commit(self, drafts: list[Draft], source: Source, confirmed: ToolCall | None = None, macro_id: str | None = None) -> None:
        """Make the dispatched fork live and log its step."""
        ...


class Spork:
    """Probing and early dispatch for one executor (see module docstring)."""

    def __init__(self, loop: SporkHost, prober: Prober, config: SporkConfig) -> None:
        self.loop, self.prober, self.config = loop, prober, config
        self.metrics = loop.metrics
        self.cost = CostModel(contention=config.contention, enabled=config.cost_model)
        self.dispatched: Draft | None = None
        self._probed: list[tuple[ProbeResult, float]] = []
        self._decision_end = 0.0
        self._request_id: str | None = None

    # -- one authority decision ---------------------------------------------------------

    async def decide(self, authority: Policy, history: History, group: anyio.abc.TaskGroup) -> Decision:
        """The authority's decision, with probes running beside it."""
        self._probed = []
        self._request_id = uuid.uuid4().hex if self.config.forward_hints else None
        send, receive = anyio.create_memory_object_stream[tuple[str, int]](math.inf)
        async with anyio.create_task_group() as probes:
            probes.start_soon(self._probe_loop, receive, history, group)
            async with send:
                decision = await self._stream(authority, history, send)
            probes.cancel_scope.cancel()  # an unfinished probe is abandoned, its request aborted
        self._decision_end = anyio.current_time()
        return decision

    async def _stream(self, authority: Policy, history: History, send: MemoryObjectSendStream[tuple[str, int]]) -> Decision:
        async def progress(text: str, tokens: int) -> None:
            await send.send((text, tokens))

        # A policy that streams offers decide_streaming (optional: not in the Policy protocol).
        decide_streaming: Callable[..., Awaitable[Decision]] | None = getattr(authority, "decide_streaming", None)
        if decide_streaming is None:
            return await authority.decide(history)
        if self._request_id is None:
            return await decide_streaming(history, progress)
        return await decide_streaming(history, progress, request_id=self._request_id)

    async def _probe_loop(self, receive: MemoryObjectReceiveStream[tuple[str, int]], history: History, group: anyio.abc.TaskGroup) -> None:
        next_at = 1
        async with receive:
            async for text, tokens in receive:
                if self.dispatched is not None or tokens < next_at:
                    continue
                if not self.cost.should_probe():
                    next_at = tokens + self.config.probe_every
                    continue
                await self._probe_once(history, text, group)
                next_at = tokens + self.config.probe_every

    async def _probe_once(self, history: History, partial: str, group: anyio.abc.TaskGroup) -> None:
        started = anyio.current_time()
        if self._request_id is None:
            result = await self.prober.probe(history, partial)
        else:
            result = await self.prober.probe(history, partial, hint_for=self._request_id)
        answered = anyio.current_time()
        self.cost.observe_probe(answered - started)
        self.metrics.observe_probe(result.tokens, result.prompt_tokens, result.cached_tokens)
        self._probed.append((result, answered))
        self.loop.timeline.add("probe", self.loop.since_start(started), self.loop.since_start(answered),
                               result.call.name if result.call else "?", f"{result.confidence:.2f}")
        if result.call is not None and self._admissible(result):
            self._dispatch(result.call, group)

    def _admissible(self, result: ProbeResult) -> bool:
        call = result.call
        assert call is not None
        specs = {spec.name: spec for spec in self.loop.backend.tool_specs()}
        if call.name not in specs or schema_errors(call.arguments, specs[call.name]):
            self.metrics.observe_invalid_probe()
            return False
        if result.confidence < self.config.gate_for(call.name):
            self.metrics.observe_gated_out()
            return False
        if self.loop.effect(call.name) is Effect.EXTERNAL:
            return False  # never speculated
        head = self.loop.chain_head()
        if head is not None and head.call == call:
            return False  # the speculator already runs it
        return self.cost.should_dispatch(call.name)

    def _dispatch(self, call: ToolCall, group: anyio.abc.TaskGroup) -> None:
        draft = Draft(call, self.loop.effect(call.name))
        self.dispatched = draft
        self.metrics.observe_early_dispatch()
        draft.scope = anyio.CancelScope()
        group.start_soon(self._execute, draft)

    async def _execute(self, draft: Draft) -> None:
        assert draft.scope is not None
        with draft.scope:
            try:
                snapshot = await self.loop.backend.snapshot()
                draft.sandbox = await self.loop.backend.fork(snapshot)
                draft.started = anyio.current_time()
                draft.observation = await self.loop.run_tool(draft.sandbox.execute, draft.call, "spork-tool")
                draft.finished = anyio.current_time()
            finally:
                draft.done.set()

    # -- when the authority's call arrives ------------------------------------------------

    async def settle(self, call: ToolCall) -> bool:
        """Commit the dispatched call if it is the authority's; otherwise drop it.  True if committed."""
        for result, answered in self._probed:
            hit = result.call == call
            self.metrics.observe_probe_outcome(hit=hit, name_hit=result.call is not None and result.call.name == call.name)
            if result.call is not None:
                self.cost.observe_outcome(result.call.name, hit, self._decision_end - answered)
        self._probed = []
        draft, self.dispatched = self.dispatched, None
        if draft is None:
            return False
        if draft.call != call:
            await self._drop(draft)
            return False
        if not draft.done.is_set():
            waited = anyio.current_time()
            await draft.done.wait()
            self.metrics.observe_tool_wait(anyio.current_time() - waited)
        lineage_ok = draft.sandbox is not None and self.loop.backend.live_token in draft.sandbox.lineage
        if draft.observation is None or not lineage_ok:
            await self._drop(draft)
            return False
        started = draft.started if draft.started is not None else self._decision_end
        finished = draft.finished if draft.finished is not None else self._decision_end
        self.metrics.observe_spork_commit(max(0.0, min(finished, self._decision_end) - started))
        await self.loop.commit([draft], "spork", call)
        return True

    async def abandon(self) -> None:
        """The authority said done: no call will confirm what was probed or dispatched."""
        self._probed = []
        draft, self.dispatched = self.dispatched, None
        if draft is not None:
            await self._drop(draft)

    async def _drop(self, draft: Draft) -> None:
        if draft.scope is not None:
            draft.scope.cancel()
        with anyio.CancelScope(shield=True):
            await draft.done.wait()
            if draft.sandbox is not None:
                await self.loop.backend.discard(draft.sandbox)
        self.metrics.observe_discarded(draft.tokens, ran=draft.sandbox is not None)

    def report(self) -> dict[str, Any]:
        return self.cost.report()
