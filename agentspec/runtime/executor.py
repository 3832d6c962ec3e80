"""The speculative executor: an authority and a speculator run side by side on one task.

The executor owns the committed history H and the live environment (a :class:`~agentspec.snapshot.SnapshotBackend`).
In one anyio task group:

* the **authority** decides the next call from H (the official trajectory);
* a **speculator worker** keeps a draft chain q1..qD ahead of H, running each draft in its own fork of the live state
  (a draft's fork continues the previous draft's);

and for each authority call ``a``:

* ``sa`` / ``smc``: an ``a`` the speculator guessed commits that guess's fork with its observation
  (:mod:`~agentspec.runtime.sa_commit`); otherwise the chain is cancelled for real and ``a`` runs on live.
* ``smc``: after q1 is confirmed, a library macro whose first steps align with the end of H and whose remaining steps
  align with the next drafts (slots bound consistently) commits those drafts too, without asking the authority, when
  it skips at least ``l_min`` decisions and the forks descend from live (:mod:`agentspec.runtime.macro_commit`).

The speculator's next call also goes to the authority's decoder as a draft hint: with the request when it is
ready first, or into the running request when it comes later (``late_hints``).  With ``draft_first`` the two
take turns instead of decoding at once: the speculator guesses, then the authority verifies its guess.

Effects fail closed: drafts of ``external`` tools are never executed, and nothing a draft does reaches live state
except through a commit.  Every committed step is logged (intent before the live change, commit after) in the run
log, which makes commits exactly-once across a resume.

Its parts, one job each: the draft chain and its worker (:mod:`~agentspec.runtime.draft_chain`), the commit journal
(:mod:`~agentspec.runtime.journal`) and resume (:mod:`~agentspec.runtime.resume`), the authority's decisions and the
user's turns (:mod:`~agentspec.runtime.decisions`), SA's commit (:mod:`~agentspec.runtime.sa_commit`), late hints
(:mod:`~agentspec.runtime.hints`); every figure is counted through :class:`~agentspec.runtime.metrics.ExecutionMetrics`'
``observe_*`` methods.  :class:`ExecutionLoop` itself settles each decision: which drafts commit, or what runs live.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from agentspec.errors import AgentSpecError, ConfigError
from agentspec.macros import MacroLibrary
from agentspec.runtime.chain_verification import VERIFIED, commit_mode
from agentspec.runtime.clock import TaskClock
from agentspec.runtime.config import ExecutorConfig, SporkConfig
from agentspec.runtime.conversation import SAY, User, say
from agentspec.runtime.decisions import Decider, UserTurns, invalid_step
from agentspec.runtime.draft import Draft, Source
from agentspec.runtime.draft_chain.drafts import DraftChain
from agentspec.runtime.draft_chain.worker import SpeculationWorker
from agentspec.runtime.governor.panel import lookahead_counts, panel_counts
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.hints import LateHints
from agentspec.runtime.journal import Journal
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.macro_commit import try_macro
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.policies.protocol import Decision, Policy
from agentspec.runtime.probe import Prober
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.runtime.sa_commit import confirm_alternative, confirm_head, reuse_read_only
from agentspec.runtime.spork import Spork
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Effect, Observation, Step, TerminationReason, ToolCall

__all__ = ["CommittedStep", "ExecutionLoop", "ExecutionResult"]

CommittedStep = Step  # the executor commits agentspec Steps


@dataclass
class ExecutionResult:
    steps: list[Step]
    termination: TerminationReason
    metrics: ExecutionMetrics
    timeline: Timeline
    note: str | None = None
    final: dict[str, Any] | None = None
    """Arguments of the authority's closing ``done`` call, if it gave any."""


def _the_agentspec_error(group: BaseExceptionGroup) -> BaseException:
    """The one error a task group failed with, unwrapped, when it is ours (a dead endpoint, a bad log...):
    callers handle :class:`AgentSpecError`, not groups.  Anything else stays the group it was."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(group)
    ours = [e for e in leaves if isinstance(e, AgentSpecError)]
    return ours[0] if ours and len(ours) == len(leaves) else group


class ExecutionLoop:
    """Runs one task's agent loop with speculation (see module docstring).

    SPORK and SA's and SMC's commits reach the loop only through the interfaces they declare
    (:class:`~agentspec.runtime.spork.SporkHost`, :class:`~agentspec.runtime.sa_commit.SAHost`,
    :class:`~agentspec.runtime.macro_commit.MacroHost`): :meth:`commit`, :meth:`spared`, :meth:`run_tool`,
    :meth:`chain_head`, :meth:`drafts`, :meth:`since_start` and the public attributes.

    ``latency`` times the tools; a model's simulated time comes from wrapping its policy
    (:class:`~agentspec.runtime.simulated.SimulatedLatency`), so the loop treats every policy alike.
    """

    def __init__(
        self,
        backend: SnapshotBackend,
        authority: Policy,
        speculator: Policy | None = None,
        *,
        config: ExecutorConfig | None = None,
        macros: MacroLibrary | None = None,
        latency: LatencyModel | None = None,
        log: RunLog | None = None,
        task_id: str = "task",
        prober: Prober | None = None,
        spork: SporkConfig | None = None,
        user: User | None = None,
        governor: Governor | None = None,
    ) -> None:
        self.config = config or ExecutorConfig()
        if self.config.mode != "sequential" and speculator is None:
            raise ConfigError(f"mode {self.config.mode} needs a speculator")
        self.backend, self.authority, self.speculator = backend, authority, speculator
        self.governor = governor  # told what each decision took and each commit saved (it may pause a speculator)
        self.macros, self.latency, self.task_id = macros, latency, task_id
        self.metrics = ExecutionMetrics()
        self.timeline = Timeline()
        self.clock = TaskClock(self.timeline, latency, self.config.seed)
        self.journal = Journal(backend, log, task_id, elapsed=lambda: self.since_start(anyio.current_time()))
        self.steps = self.journal.steps
        self.chain = DraftChain(self, self.config)
        self.worker = SpeculationWorker(self.chain, self.journal, speculator, LateHints(authority, self.metrics))
        self.spork = Spork(self, prober, spork or SporkConfig()) if prober is not None else None
        self.clock.on_tool = self.spork.cost.observe_tool if self.spork is not None else None
        self.decider = Decider(self, authority, self.chain, self.journal, self.config, governor, self.spork)
        self.users = UserTurns(self, user, self.journal) if user is not None else None
        self._final: dict[str, Any] | None = None
        self._standing: list[tuple[int, list[ToolCall]]] = []
        """(step, drafted calls) each time the authority decided with a draft chain standing."""

    # ------------------------------------------------------------------ main loop

    async def run(self, resumed: TaskLog | None = None) -> ExecutionResult:
        """Execute until the authority says done or a limit is hit; ``resumed`` continues a logged run."""
        if resumed is not None:
            self.resume(resumed)
        await self.journal.replay()  # a fresh environment's adopted steps run again (nothing otherwise)
        if self.config.mode == "smc" and self.macros is not None:
            self.metrics.observe_commit_mode(await commit_mode(self.authority, self.config.macro_commit))
        self.clock.start(already=self.journal.resumed_at)  # a resumed task's time goes on from its last commit
        try:
            termination, note = await self._loop()
        except BaseExceptionGroup as group:
            error = _the_agentspec_error(group)
            if error is group:
                raise
            raise error from group
        await self.chain.reset(count_waste=True)
        committed = [s.call for s in self.steps]
        self.metrics.score_predictions(self._standing, committed)
        # The task is over: the panel's predicted ends can be scored now, once (the panel is this task's own).
        self.metrics.observe_panel(panel_counts(self.speculator, committed))
        self.metrics.observe_lookahead(*lookahead_counts(self.speculator))
        self.metrics.observe_wall(self.since_start(anyio.current_time()))
        return ExecutionResult(self.steps, termination, self.metrics, self.timeline, note, self._final)

    async def _loop(self) -> tuple[TerminationReason, str | None]:
        termination = TerminationReason.AGENT_STOP
        note = None
        async with anyio.create_task_group() as group:
            if self.users is not None and not self.steps:
                await self._execute_live(say(self.users.user.opening, "opening"))  # the agent's first words
            if self.config.mode != "sequential":
                group.start_soon(self.worker.work, group)
            while (ended := self.users.ended if self.users is not None else None) is None:
                if self.journal.errors >= self.config.max_errors:  # the opening's user turn's errors count too (tau2)
                    termination = TerminationReason.TOO_MANY_ERRORS
                    break
                if len(self.steps) >= self.config.max_calls:
                    termination = TerminationReason.MAX_STEPS
                    break
                decision = await self.decider.decide(group)
                if self.chain.drafts:
                    self._standing.append((len(self.steps), [d.call for d in self.chain.drafts]))
                if decision.call is None and decision.invalid is None:
                    self._final = decision.final
                    if self.spork is not None:
                        await self.spork.abandon()
                    if decision.text is not None:
                        termination, note = TerminationReason.AGENT_ERROR, "the authority answered without a tool call"
                    break
                await self._settle(decision)
                if self.journal.errors >= self.config.max_errors:
                    termination = TerminationReason.TOO_MANY_ERRORS
                    break
            else:
                termination = ended
            group.cancel_scope.cancel()
        return termination, note

    def resume(self, resumed: TaskLog) -> None:
        """Continue a logged task (:meth:`Journal.resume`); call before :meth:`run` to fail before any work starts."""
        self.journal.resume(resumed, self.config.resume_uncertain)

    # ------------------------------------------------------------------ what SPORK and SMC's commit use

    def chain_head(self) -> Draft | None:
        """The first draft of the speculator's chain (the next call it predicts), if any."""
        return self.chain.head()

    def drafts(self) -> list[Draft]:
        """The draft chain, head first (a copy: the chain itself changes as drafts commit or reset)."""
        return list(self.chain.drafts)

    def since_start(self, at: float) -> float:
        """Seconds from the start of :meth:`run` to clock time ``at`` (timeline offsets)."""
        return self.clock.since_start(at)

    def effect(self, name: str) -> Effect:
        """A call's effect; a message to the user is ``external`` (never run in a fork, nothing drafted after it)."""
        return Effect.EXTERNAL if name == SAY else self.backend.effect(name)

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        """Run ``call`` with ``execute`` (live state or a fork), timed on ``lane`` (:meth:`TaskClock.run_tool`)."""
        return await self.clock.run_tool(execute, call, lane)

    async def commit(self, drafts: list[Draft], source: Source, confirmed: ToolCall | None = None, macro_id: str | None = None) -> None:
        """Commit drafts (a chain prefix) atomically: log intents, promote the deepest fork, log commits."""
        calls = [confirmed if (i == 0 and confirmed is not None) else d.call for i, d in enumerate(drafts)]
        eids = self.journal.intents(calls, source)
        last = drafts[-1].sandbox
        assert last is not None
        started = anyio.current_time()
        with anyio.CancelScope(shield=True):
            await self.backend.commit(last)
        self.chain.advance(len(drafts))
        self.timeline.add("commit", self.since_start(started), self.since_start(anyio.current_time()),
                          "+".join(c.name for c in calls), source)
        entries = []
        for call, draft, eid in zip(calls, drafts, eids, strict=True):
            assert draft.observation is not None
            entries.append((call, draft.observation.model_copy(update={"call_id": call.id}), eid))
        self.journal.record(entries, source, macro_id)
        for draft in drafts:
            self.spared(draft, skipped=source == "macro")  # a macro's drafts each spare an authority decision
        await self.chain.retire(drafts)

    def spared(self, draft: Draft, *, skipped: bool) -> None:
        """``draft`` was committed: tell the governor what it spared the authority (``skipped``: a decision too)."""
        if self.governor is not None:
            self.governor.observe_committed(draft, self.decider.decided_at, skipped=skipped)

    # ------------------------------------------------------------------ settling a decision

    async def _settle(self, decision: Decision) -> None:
        if decision.invalid is not None:
            if self.spork is not None:
                await self.spork.abandon()
            call, observation = invalid_step(decision.invalid)
            self.journal.record([(call, observation, self.journal.intents([call], "invalid")[0])], "invalid")
            return
        assert decision.call is not None
        call = decision.call
        if self.spork is not None and await self.spork.settle(call):
            await self.chain.reset(count_waste=True)  # drafts forked before this commit are stale
            return
        if self.config.mode != "sequential":
            if await confirm_head(self, call):
                if self.config.mode == "smc" and self.macros is not None:
                    await try_macro(self, self.macros, l_min=self.config.l_min, verify=self.config.verify_macros,
                                    verified=self.metrics.macro_commit == VERIFIED)
                return
            if await confirm_alternative(self, call) or reuse_read_only(self, call):
                return
        await self._execute_live(call)

    async def _execute_live(self, call: ToolCall) -> None:
        if self.effect(call.name) is Effect.READ_ONLY:
            await self._run_live(call)
            return
        async with self.chain.restarted():  # speculation restarts from the state *after* this call
            await self._run_live(call)

    async def _run_live(self, call: ToolCall) -> None:
        (eid,) = self.journal.intents([call], "authority")
        started = anyio.current_time()
        if call.name == SAY and self.users is not None:
            observation = await self.users.play(call)
        else:
            observation = await self.run_tool(lambda c: self.backend.execute(c), call, "tool")
        self.metrics.observe_live(anyio.current_time() - started)
        self.journal.record([(call, observation, eid)], "authority")
