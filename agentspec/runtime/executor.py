"""The speculative executor: an authority and a speculator run side by side on one task.

The executor owns the committed history H and the live environment (a
:class:`~agentspec.snapshot.SnapshotBackend`).  In one anyio task group:

* the **authority** decides the next call from H (the official trajectory);
* a **speculator worker** keeps a draft chain q1..qD ahead of H, running each
  draft in its own fork of the live state (a draft's fork continues the
  previous draft's);

and for each authority call ``a``:

* ``sa`` / ``smc``: if ``a == q1`` (canonical equality), q1's fork is
  committed with its observation: the tool does not run again.  With ``spec_width`` K > 1 the speculator's next
  K-1 ranked guesses for each position (``Decision.alternatives``) run too, each in its own fork of the same
  parent state, and ``a`` equal to one of q1's commits that fork instead (the drafts after q1 continued q1's fork:
  they are dropped).  A read-only
  ``a`` may also be answered from any matching finished draft whose fork still
  equals live state.  Otherwise the chain is cancelled (model requests and tool
  work are stopped for real, forks discarded) and ``a`` runs on live.
* ``smc``: after q1 is confirmed, a library macro whose first steps align with
  the end of H and whose remaining steps align with the next drafts (slots
  bound consistently) commits those drafts too, without asking the authority,
  when it skips at least ``l_min`` decisions and the forks descend from live
  (:mod:`agentspec.runtime.macro_commit`).

The speculator's next call also goes to the authority's decoder as a draft hint: with the request when it is
ready first, or into the running request when it comes later (``late_hints``).  With ``draft_first`` the two
take turns instead of decoding at once: the speculator guesses, then the authority verifies its guess.

Effects fail closed: drafts of ``external`` tools are never executed, and
nothing a draft does reaches live state except through a commit.  Every
committed step is logged (intent before the live change, commit after) in the
run log, which makes commits exactly-once across a resume.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from agentspec.errors import AgentSpecError, ConfigError, SnapshotError
from agentspec.macros import MacroLibrary
from agentspec.runtime.chain_verify import VERIFIED, commit_mode
from agentspec.runtime.conversation import SAY, User, conversation, say, turn_observation
from agentspec.runtime.draft import Draft, Source
from agentspec.runtime.governor import Governor, propose
from agentspec.runtime.latency import LatencyModel, estimate_tokens
from agentspec.runtime.macro_commit import try_macro
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.modes import BASE_MODES, BaseMode
from agentspec.runtime.policies import Decision, DraftedHistory, History, Policy, PredictedHistory, TakesHints
from agentspec.runtime.probe import Prober
from agentspec.runtime.runlog import RunLog, TaskLog, effect_id
from agentspec.runtime.spork import Spork, SporkConfig
from agentspec.snapshot import Checkpointable, Sandbox, SnapshotBackend
from agentspec.types import Effect, Observation, Step, TerminationReason, ToolCall

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


@dataclass
class ExecutorConfig:
    mode: BaseMode = "sequential"
    depth: int = 4
    l_min: int = 1
    max_calls: int = 100
    max_errors: int = 10
    seed: int = 0
    speculate_first: bool = False
    """Let the speculator fill its chain (or end it) before each authority decision.  A recording run does this,
    so that it asks the speculator every context a replay on any clock can ask (greedy models: the same answers)."""
    draft_first: bool = False
    """The speculator drafts, the authority verifies, in turn: the authority is asked only once the speculator has
    predicted the next call or ended its chain (not waiting for the call's tool), so the prediction reaches its
    decoder as a hint from its first forward; and the speculator does not decode while the authority does.  For
    models sharing one machine's cores, where decoding both at once slows the authority."""
    verify_macros: bool = False
    """After a macro commit, ask the authority what it would have done at each skipped step and
    update the macro's n, k (online reliability; a macro whose bound falls below tau stops firing)."""
    spec_width: int = 1
    """Guesses run per chain position: the speculator's call and its first ``spec_width - 1`` alternatives."""
    macro_commit: Literal["verified", "trusted"] = "verified"
    """SMC: the authority verifies a fired macro's chain and only the prefix it makes itself commits (lossless;
    the paper's lossy commit where the authority cannot verify), or ``trusted``: the paper's commit."""

    def __post_init__(self) -> None:
        if self.macro_commit not in ("verified", "trusted"):
            raise ConfigError(f"unknown macro commit {self.macro_commit!r}; choose verified or trusted")
        if self.mode not in BASE_MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of {', '.join(BASE_MODES)}")
        if self.depth < 1 or self.l_min < 1 or self.spec_width < 1:
            raise ConfigError("depth, l_min and spec_width must be >= 1")


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

    SPORK and SMC's commit reach the loop only through the interfaces they declare
    (:class:`~agentspec.runtime.spork.SporkHost`, :class:`~agentspec.runtime.macro_commit.MacroHost`):
    :meth:`commit`, :meth:`run_tool`, :meth:`chain_head`, :meth:`drafts`, :meth:`since_start` and the public
    attributes.

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
        self.user = user
        self.governor = governor
        """Told how long each authority decision took and what each committed draft saved (it may pause a
        speculator: see :mod:`agentspec.runtime.governor`); None: no governor."""
        self._hold: anyio.Event | None = None
        """Unset while the governor wants this authority decision without speculation (a baseline sample)."""
        self._decided_at = 0.0
        self._asking: anyio.Event | None = None
        """Unset while the speculator answers a request."""
        self._user_ended: TerminationReason | None = None
        self.macros, self.latency, self.log, self.task_id = macros, latency, log, task_id
        self.steps: list[Step] = []
        self.metrics = ExecutionMetrics()
        self.timeline = Timeline()
        self._chain: list[Draft] = []
        self._chain_end = False
        self._epoch = 0
        self._wake = anyio.Event()
        self._drafted = anyio.Event()
        """Set whenever a draft finishes or the chain ends (see :meth:`_chain_settled`)."""
        self._spec_scope: anyio.CancelScope | None = None
        self._live_gate: anyio.Event | None = None
        self._turn: anyio.Event | None = None
        """Draft-first: unset from the moment the speculator's guess is in until the authority has decided on it
        (the speculator waits: the authority has the cores)."""
        self._rng = random.Random(self.config.seed)
        self._errors = 0
        self._snapshot_failures = 0
        self._final: dict[str, Any] | None = None
        self._standing: list[tuple[int, list[ToolCall]]] = []
        """(step, drafted calls) each time the authority decided with a draft chain standing."""
        self._t0 = 0.0
        self._group: anyio.abc.TaskGroup | None = None
        self.spork = Spork(self, prober, spork or SporkConfig()) if prober is not None else None

    # ------------------------------------------------------------------ main loop

    async def run(self, resumed: TaskLog | None = None) -> ExecutionResult:
        """Execute until the authority says done or a limit is hit; ``resumed`` continues a logged run."""
        if resumed is not None:
            self.resume(resumed)
        if self.config.mode == "smc" and self.macros is not None:
            self.metrics.macro_commit = await commit_mode(self.authority, self.config.macro_commit)
        self._t0 = anyio.current_time()
        try:
            termination, note = await self._loop()
        except BaseExceptionGroup as group:
            error = _the_agentspec_error(group)
            if error is group:
                raise
            raise error from group
        await self._reset_chain(count_waste=True)
        self.metrics.score_predictions(self._standing, [s.call for s in self.steps])
        self.metrics.wall_s = anyio.current_time() - self._t0
        return ExecutionResult(self.steps, termination, self.metrics, self.timeline, note, self._final)

    async def _loop(self) -> tuple[TerminationReason, str | None]:
        termination = TerminationReason.AGENT_STOP
        note = None
        async with anyio.create_task_group() as group:
            self._group = group
            if self.user is not None and not self.steps:
                await self._execute_live(say(self.user.opening, "opening"))  # the agent's first words are fixed
            if self.config.mode != "sequential":
                group.start_soon(self._speculate)
            while self._user_ended is None:
                if len(self.steps) >= self.config.max_calls:
                    termination = TerminationReason.MAX_STEPS
                    break
                decision = await self._ask_authority()
                if self._chain:
                    self._standing.append((len(self.steps), [d.call for d in self._chain]))
                if decision.call is None and decision.invalid is None:
                    self._final = decision.final
                    if self.spork is not None:
                        await self.spork.abandon()
                    if decision.text is not None:
                        termination, note = TerminationReason.AGENT_ERROR, "the authority answered without a tool call"
                    break
                await self._settle(decision)
                if self._errors >= self.config.max_errors:
                    termination = TerminationReason.TOO_MANY_ERRORS
                    break
            else:
                termination = self._user_ended
            group.cancel_scope.cancel()
        return termination, note

    def resume(self, resumed: TaskLog) -> None:
        """Adopt a logged task's steps and the live state after them, so none of their effects is applied again.

        Raises :class:`ConfigError` when the log's checkpoint is not trusted data, or when it cannot give back
        the state its steps left.  Call before :meth:`run` to fail before any work starts."""
        if resumed.checkpoint is not None:
            if not isinstance(self.backend, Checkpointable):
                raise ConfigError(f"task {self.task_id!r}: the log holds a checkpoint this backend cannot restore")
            self.backend.restore_checkpoint(resumed.checkpoint)
        elif resumed.steps and isinstance(self.backend, Checkpointable):
            raise ConfigError(
                f"task {self.task_id!r}: the log holds {len(resumed.steps)} committed steps but no checkpoint of the "
                "state they left (this environment's state cannot be serialised), so resuming would lose their effects"
            )
        for record in resumed.steps:
            call = ToolCall.model_validate(record["call"])
            observation = Observation.model_validate(record["observation"])
            self.steps.append(Step(index=len(self.steps), call=call, observation=observation,
                                   source=record["source"], effect_id=record["effect_id"]))
            self._errors += int(observation.error)

    def _history(self) -> History:
        return [(s.call, s.observation) for s in self.steps]

    def chain_head(self) -> Draft | None:
        """The first draft of the speculator's chain (the next call it predicts), if any."""
        return self._chain[0] if self._chain else None

    def drafts(self) -> list[Draft]:
        """The draft chain, head first (a copy: the chain itself changes as drafts commit or reset)."""
        return list(self._chain)

    def since_start(self, at: float) -> float:
        """Seconds from the start of :meth:`run` to clock time ``at`` (timeline offsets)."""
        return at - self._t0

    async def _ask_authority(self) -> Decision:
        if self.config.mode != "sequential":
            waited = anyio.current_time()
            wait_mark = self.governor.mark() if self.governor is not None else None
            if self.config.speculate_first:
                await self._chain_settled()
            elif self.config.draft_first:
                await self._head_predicted()
            self.metrics.draft_wait_s += anyio.current_time() - waited
            if self.governor is not None and wait_mark is not None:
                self.governor.observe_wait(wait_mark)
        if self.governor is not None and self.config.mode != "sequential" and self.governor.hold():
            self._hold = anyio.Event()  # no new speculator request until this decision is made...
            if self._asking is not None:
                await self._asking.wait()  # ...and none in flight when it starts: a baseline sample
        mark = self.governor.mark() if self.governor is not None else None
        started = anyio.current_time()
        head = self.chain_head()
        # The speculator's next call rides along as a draft hint for the authority's decoder (never a decision).
        history = PredictedHistory(self._history(), [head.call] if head is not None and head.executable else [])
        try:
            if self.spork is not None and self._group is not None:
                decision = await self.spork.decide(self.authority, history, self._group)
            else:
                decision = await self.authority.decide(history)
        finally:
            if self._turn is not None:
                self._turn.set()  # draft-first: the speculator's turn again
            if self._hold is not None:
                self._hold.set()
                self._hold = None
        if self.governor is not None and mark is not None:
            self.governor.observe_decision(mark)
        ended = self._decided_at = anyio.current_time()
        self.metrics.authority_calls += 1
        if decision.forwards is not None:
            self.metrics.authority_reported_calls += 1
            self.metrics.authority_forwards += decision.forwards
            self.metrics.authority_hint_tokens += decision.hint_tokens or 0
        self.metrics.authority_wait_s += ended - started
        label = decision.call.name if decision.call else "done"
        self.timeline.add("authority", started - self._t0, ended - self._t0, label)
        return decision

    async def run_tool(self, execute: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall, lane: str) -> Observation:
        """Run ``call`` with ``execute`` (live state or a fork), charging simulated tool latency and timing it
        on ``lane``."""
        started = anyio.current_time()
        if self.latency is not None:
            await anyio.sleep(self.latency.tool.seconds(call.name, self._rng))
        observation = await execute(call)
        finished = anyio.current_time()
        self.timeline.add(lane, started - self._t0, finished - self._t0, call.name)
        if self.spork is not None:  # every execution (live, draft, early dispatch) teaches SPORK the tool's latency
            self.spork.cost.observe_tool(call.name, finished - started)
        return observation

    # ------------------------------------------------------------------ deciding a step

    async def _settle(self, decision: Decision) -> None:
        if decision.invalid is not None:
            if self.spork is not None:
                await self.spork.abandon()
            bad = decision.invalid
            content = f"Error: the arguments of {bad.name!r} are not a valid JSON object ({bad.error})"
            call = ToolCall(name=bad.name or "invalid", arguments={}, id=bad.id)
            observation = Observation(call_id=bad.id, name=bad.name, content=content, error=True)
            self._finish_commit([(call, observation, self._intents([call], "invalid")[0])], "invalid")
            return
        assert decision.call is not None
        call = decision.call
        if self.spork is not None and await self.spork.settle(call):
            await self._reset_chain(count_waste=True)  # drafts forked before this commit are stale
            return
        if self.config.mode != "sequential":
            if await self._confirm_first_draft(call):
                return
            if await self._confirm_alternative(call):
                return
            if self._reuse_read_only(call):
                return
        await self._execute_live(call)

    async def _confirm_first_draft(self, call: ToolCall) -> bool:
        if not self._chain or self._chain[0].call != call or not self._chain[0].executable:
            return False
        first = self._chain[0]
        if not first.done.is_set():
            started = anyio.current_time()
            await first.done.wait()  # the tool is already running in its fork: wait, don't rerun
            self.metrics.tool_wait_s += anyio.current_time() - started
        if first.sandbox is None or first.observation is None or self.backend.live_token not in first.sandbox.lineage:
            return False
        await self.commit([first], "sa", call)
        self.metrics.commits_sa += 1
        self.metrics.hit_at_rank(0)
        if self.config.mode == "smc" and self.macros is not None:
            await try_macro(self, self.macros, l_min=self.config.l_min, verify=self.config.verify_macros,
                            verified=self.metrics.macro_commit == VERIFIED)
        return True

    async def _confirm_alternative(self, call: ToolCall) -> bool:
        """Commit the fork of the head position's alternative guess equal to ``call`` (``spec_width`` > 1).

        The drafts after the head continued the head's fork, not the alternative's: they are dropped, and
        speculation restarts from the state after the commit."""
        head = self.chain_head()
        if head is None:
            return False
        ranked = [(rank, alt) for rank, alt in enumerate(head.alternatives, 1) if alt.call == call]
        if not ranked:
            return False
        rank, alternative = ranked[0]
        if not alternative.done.is_set():
            started = anyio.current_time()
            await alternative.done.wait()  # already running in its fork: wait, don't rerun
            self.metrics.tool_wait_s += anyio.current_time() - started
        sandbox = alternative.sandbox
        if sandbox is None or alternative.observation is None or self.backend.live_token not in sandbox.lineage:
            return False
        head.alternatives.remove(alternative)
        gate = self._live_gate = anyio.Event()  # the speculator restarts from the state after this commit
        try:
            await self._reset_chain(count_waste=True)
            self._chain = [alternative]
            await self.commit([alternative], "sa", call)
        finally:
            self._live_gate = None
            gate.set()
        self.metrics.commits_sa += 1
        self.metrics.hit_at_rank(rank)
        return True

    def _reuse_read_only(self, call: ToolCall) -> bool:
        """Serve a read-only call from a finished draft whose fork state still equals live state."""
        if self.effect(call.name) is not Effect.READ_ONLY:
            return False
        for draft in self._chain:
            if not draft.done.is_set() or draft.sandbox is None or draft.observation is None:
                return False
            if draft.call == call and self.backend.live_token in draft.sandbox.lineage:
                # Journalled like any commit: a resumed run must count this step, or it re-runs what follows.
                (eid,) = self._intents([call], "reuse")
                self._finish_commit([(call, draft.observation.model_copy(update={"call_id": call.id}), eid)], "reuse")
                self.metrics.reused_read_only += 1
                self._saved(draft, skipped=False)
                return True
            if draft.effect is not Effect.READ_ONLY:
                return False  # later drafts saw state this one changed
        return False

    async def _execute_live(self, call: ToolCall) -> None:
        gate = None
        if self.effect(call.name) is not Effect.READ_ONLY:
            # Speculation restarts from the state *after* this call: hold it until the call is done.
            gate = self._live_gate = anyio.Event()
            await self._reset_chain(count_waste=True)
        try:
            (eid,) = self._intents([call], "authority")
            started = anyio.current_time()
            if call.name == SAY and self.user is not None:
                observation = await self._user_turn(call)
            else:
                observation = await self.run_tool(lambda c: self.backend.execute(c), call, "tool")
            self.metrics.tool_wait_s += anyio.current_time() - started
            self.metrics.live_executions += 1
            self._finish_commit([(call, observation, eid)], "authority")
        finally:
            if gate is not None:
                self._live_gate = None
                gate.set()

    def effect(self, name: str) -> Effect:
        """A call's effect; a message to the user is ``external`` (never run in a fork, nothing drafted after it)."""
        return Effect.EXTERNAL if name == SAY else self.backend.effect(name)

    async def _user_turn(self, call: ToolCall) -> Observation:
        """Deliver the agent's message and play the user's turn on live state (its calls, then its reply)."""
        assert self.user is not None
        started = anyio.current_time()
        said = conversation([*self._history(), (call, None)])
        turn = await self.user.reply(said, lambda c: self.run_tool(lambda u: self.backend.execute(u, "user"), c, "user-tool"))
        self.timeline.add("user", started - self._t0, anyio.current_time() - self._t0, "reply")
        if turn.stop or turn.error:
            self._user_ended = TerminationReason.USER_ERROR if turn.error else TerminationReason.USER_STOP
        self._errors += sum(int(m.error) for m in turn.messages if m.role == "tool")
        return turn_observation(call, turn)

    # ------------------------------------------------------------------ commits

    def _intents(self, calls: list[ToolCall], source: Source) -> list[str]:
        """Effect ids of the next steps, logged as intents before live state changes."""
        first = len(self.steps)
        if self.log is not None:
            return self.log.intents(self.task_id, first, calls, source)
        return [effect_id(self.task_id, first + i, call) for i, call in enumerate(calls)]

    async def commit(self, drafts: list[Draft], source: Source, confirmed: ToolCall | None = None, macro_id: str | None = None) -> None:
        """Commit drafts (a chain prefix) atomically: log intents, promote the deepest fork, log commits."""
        calls = [confirmed if (i == 0 and confirmed is not None) else d.call for i, d in enumerate(drafts)]
        eids = self._intents(calls, source)
        last = drafts[-1].sandbox
        assert last is not None
        started = anyio.current_time()
        with anyio.CancelScope(shield=True):
            await self.backend.commit(last)
        del self._chain[: len(drafts)]
        self.timeline.add("commit", started - self._t0, anyio.current_time() - self._t0, "+".join(c.name for c in calls), source)
        entries = []
        for call, draft, eid in zip(calls, drafts, eids, strict=True):
            assert draft.observation is not None
            entries.append((call, draft.observation.model_copy(update={"call_id": call.id}), eid))
        self._finish_commit(entries, source, macro_id)
        self._wake.set()
        for draft in drafts:
            self._saved(draft, skipped=source == "macro")  # a macro's drafts each spare an authority decision
        with anyio.CancelScope(shield=True):
            for draft in drafts:
                await self._drop_alternatives(draft)  # their position is decided
        for draft in drafts[:-1]:
            if draft.sandbox is not None:
                await self.backend.discard(draft.sandbox)

    def _saved(self, draft: Draft, *, skipped: bool) -> None:
        """Tell the governor what a committed draft of a named speculator spared the authority: the tool time it
        ran before the authority's decision came (and, committed by a macro, the decision itself)."""
        if self.governor is None or draft.speculator is None or draft.started is None or draft.finished is None:
            return
        until = draft.finished if skipped else min(draft.finished, self._decided_at)
        self.governor.observe_saving(draft.speculator, until - draft.started)
        if skipped:
            self.governor.observe_skipped(draft.speculator, 1)

    def _finish_commit(self, entries: list[tuple[ToolCall, Observation, str]], source: Source, macro_id: str | None = None) -> None:
        first = len(self.steps)
        for call, observation, eid in entries:
            self._append(call, observation, source, eid, macro_id)
        if self.log is not None:
            # One record for the batch: a crash leaves all of a macro's steps in the log, or none of them.
            checkpoint = self.backend.checkpoint() if isinstance(self.backend, Checkpointable) else None
            logged = [(first + i, eid, observation) for i, (_, observation, eid) in enumerate(entries)]
            self.log.commit(self.task_id, logged, checkpoint)

    def _append(self, call: ToolCall, observation: Observation, source: Source, eid: str, macro_id: str | None = None) -> None:
        self.steps.append(Step(index=len(self.steps), call=call, observation=observation, source=source,
                               effect_id=eid, macro_id=macro_id))
        self._errors += int(observation.error)

    # ------------------------------------------------------------------ speculation

    async def _chain_settled(self) -> None:
        """Wait until the chain is ``depth`` deep or ended, with every draft's tool done."""
        while True:
            self._drafted = anyio.Event()
            full = self._chain_end or len(self._chain) >= self.config.depth
            if full and all(d.done.is_set() for d in self._chain):
                return
            await self._drafted.wait()

    def _authority_turn(self) -> None:
        """Draft-first: a guess is in (or the chain ended), so the speculator pauses until the authority decided.
        Taken here, when the guess lands, not when the authority wakes: the speculator must not slip in between."""
        if self.config.draft_first:
            self._turn = anyio.Event()

    async def _head_predicted(self) -> None:
        """Wait until the chain has a head (its tool may still run) or has ended."""
        while True:
            self._drafted = anyio.Event()
            if self._chain or self._chain_end:
                return
            await self._drafted.wait()

    async def _speculate(self) -> None:
        """Keep the draft chain ``depth`` deep; restart whenever the chain is reset."""
        while True:
            epoch = self._epoch
            with anyio.CancelScope() as scope:
                self._spec_scope = scope
                while epoch == self._epoch and not self._chain_end and len(self._chain) < self.config.depth:
                    await self._extend(epoch)
            self._spec_scope = None
            if epoch == self._epoch and (self._chain_end or len(self._chain) >= self.config.depth):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _extend(self, epoch: int) -> None:
        try:
            await self._draft_next(epoch)
        finally:
            self._drafted.set()

    async def _draft_next(self, epoch: int) -> None:
        assert self.speculator is not None
        if self._live_gate is not None:
            await self._live_gate.wait()
            return  # the epoch moved on: let the worker loop restart from the new state
        if self._chain and not self._chain[-1].done.is_set():
            await self._chain[-1].done.wait()
        if self._turn is not None:
            await self._turn.wait()  # draft-first: the authority is deciding on the last guess
            if epoch != self._epoch:
                return
        if self._hold is not None:
            await self._hold.wait()  # the governor times this authority decision without speculation
            if epoch != self._epoch:
                return
        history = DraftedHistory(self._history(), [(d.call, d.observation) for d in self._chain],
                                 self._chain[-1].sandbox if self._chain else None)
        started = anyio.current_time()
        asking = self._asking = anyio.Event()
        try:
            proposal = await propose(self.speculator, history)
        finally:
            asking.set()
            self._asking = None
        decision = proposal.decision
        self.metrics.speculator_calls += 1
        self.metrics.speculator_busy_s += anyio.current_time() - started
        self.timeline.add("speculator", started - self._t0, anyio.current_time() - self._t0, decision.call.name if decision.call else "done")
        if epoch != self._epoch:
            return
        if decision.call is None:
            self._chain_end = True
            self._authority_turn()
            return
        draft = Draft(decision.call, self.effect(decision.call.name), speculator=proposal.name,
                      tokens=decision.output_tokens or estimate_tokens(decision.call.canonical()))
        self._chain.append(draft)
        self._drafted.set()  # the call is known: a draft-first authority may start before its tool is done
        self._authority_turn()
        if len(self._chain) == 1 and draft.executable:
            self._hint_late(draft.call, history.committed)
        if not draft.executable:
            self._chain_end = True  # never run an external effect speculatively, nor anything after it
            draft.done.set()
            return
        parent = self._chain[-2].sandbox if len(self._chain) > 1 else None
        self._start_alternatives(draft, decision.alternatives, parent)
        try:
            snapshot = await self.backend.snapshot(parent)
            draft.sandbox = await self.backend.fork(snapshot)
            self.metrics.speculative_tool_calls += 1
            draft.started = anyio.current_time()
            draft.observation = await self.run_tool(draft.sandbox.execute, draft.call, "speculator-tool")
            draft.finished = anyio.current_time()
        except SnapshotError:
            # The parent fork went away (committed or discarded meanwhile): drop this draft and retry
            # from the new state, unless the backend keeps failing.
            if draft in self._chain:
                self._chain.remove(draft)
            with anyio.CancelScope(shield=True):
                await self._drop_alternatives(draft)
            self._snapshot_failures += 1
            self.metrics.snapshot_failures += 1
            self._chain_end = self._snapshot_failures >= 3
        else:
            self._snapshot_failures = 0
        finally:
            draft.done.set()

    def _start_alternatives(self, draft: Draft, guesses: Sequence[ToolCall], parent: Sandbox | None) -> None:
        """Run the speculator's next ``spec_width - 1`` guesses for ``draft``'s position, each in its own fork of
        ``parent`` (None: live state), beside the draft.  External ones never run (nor count)."""
        if self.config.spec_width < 2 or self._group is None:
            return
        seen = [draft.call]
        for call in guesses:
            if len(draft.alternatives) >= self.config.spec_width - 1:
                break
            if call in seen or self.effect(call.name) is Effect.EXTERNAL:
                continue
            seen.append(call)
            alternative = Draft(call, self.effect(call.name), speculator=draft.speculator,
                                tokens=estimate_tokens(call.canonical()), scope=anyio.CancelScope())
            draft.alternatives.append(alternative)
            self._group.start_soon(self._run_alternative, alternative, parent)

    async def _run_alternative(self, alternative: Draft, parent: Sandbox | None) -> None:
        assert alternative.scope is not None
        with alternative.scope:
            try:
                snapshot = await self.backend.snapshot(parent)
                alternative.sandbox = await self.backend.fork(snapshot)
                self.metrics.speculative_tool_calls += 1
                self.metrics.alternative_tool_calls += 1
                alternative.started = anyio.current_time()
                alternative.observation = await self.run_tool(alternative.sandbox.execute, alternative.call,
                                                              "speculator-tool")
                alternative.finished = anyio.current_time()
            except SnapshotError:
                pass  # the parent fork went away: this guess can no longer be committed
            finally:
                alternative.done.set()

    async def _drop_alternatives(self, draft: Draft) -> None:
        """Stop and discard ``draft``'s alternatives, counted as waste (call shielded)."""
        alternatives, draft.alternatives = draft.alternatives, []
        for alternative in alternatives:
            if alternative.scope is not None:
                alternative.scope.cancel()
            await alternative.done.wait()
            self.metrics.drafts_discarded += 1
            self.metrics.wasted_tokens += alternative.tokens
            self.metrics.wasted_tool_calls += int(alternative.sandbox is not None)
            if alternative.sandbox is not None:
                await self.backend.discard(alternative.sandbox)

    def _hint_late(self, call: ToolCall, steps: int) -> None:
        """Hand the next call the speculator predicts to the authority's decision of it, if that is already
        running: its decoder drafts the call from its next forward (the hint missed the request's start).
        Decided now, sent in the background: a decision that starts later gets the call with its request."""
        authority = self.authority
        if not isinstance(authority, TakesHints) or not authority.deciding(steps) or self._group is None:
            return
        self.metrics.late_hints += 1

        async def send() -> None:
            self.metrics.late_hints_delivered += int(await authority.hint([call], steps))

        self._group.start_soon(send)

    async def _reset_chain(self, count_waste: bool) -> None:
        """Drop every draft: cancel in-flight work, discard forks, count the waste."""
        self._epoch += 1
        if self._spec_scope is not None:
            self._spec_scope.cancel()
        drafts, self._chain = self._chain, []
        self._chain_end = False
        with anyio.CancelScope(shield=True):
            for draft in drafts:
                await self._drop_alternatives(draft)
                if count_waste:
                    self.metrics.drafts_discarded += 1
                    self.metrics.wasted_tokens += draft.tokens
                    self.metrics.wasted_tool_calls += int(draft.sandbox is not None)
                if draft.sandbox is not None:
                    await self.backend.discard(draft.sandbox)
                draft.done.set()
        self._wake.set()
        self._drafted.set()
