"""The one place where a run is put together: a :class:`~agentspec.run_spec.RunSpec` becomes running executors.

    spec = RunSpec.of(bench="tau2-telecom", split="small", agent="oracle", modes="sequential,sa",
                      speculator_model="noisy-oracle:0.8", latency_model="smc-paper")
    outcome = agentspec.pipeline.run(spec)    # every mode over the same tasks, side by side
    outcome.modes["sa"].episodes[0].reward

Layers, each usable alone:

* :func:`build_loop` makes the :class:`~agentspec.runtime.executor.ExecutionLoop` for one task from a spec and
  the parts (backend, policies, prober, user): the only place an executor is constructed;
* :func:`assemble` chooses one episode's parts from the spec and the bench (oracle or model authority, noisy or
  model speculator, simulated latency, SPORK's prober, normal mode's user);
* :func:`run_episode` plays and scores one task.

Above it, :mod:`agentspec.batch` runs one mode's tasks as a batch (run log, resume, clock, cassette; in this
process or on a Ray cluster), and :mod:`agentspec.pipeline` runs every mode of a spec and returns its
:class:`Outcome`.  A bench only describes its domain (:class:`~agentspec.bench.protocol.Bench`); nothing here
knows one bench from another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.bench.episode import Episode, LoggedEpisode
from agentspec.bench.protocol import Bench, ModeFigures, RecordedRuns, has_user, solo_calls, user_of
from agentspec.bench.registry import bench_data as registry_bench_data
from agentspec.bench.registry import bench_names, shipped_macros
from agentspec.errors import AgentSpecError, ConfigError
from agentspec.learned_speculator.artifact import load as load_speculator
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.learned_speculator.runs import episode_speculator, fitted_for
from agentspec.learned_speculator.trajectories import task_text
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.models.cassette import ReplayMiss
from agentspec.results import Results, summarize
from agentspec.roles import PolicyMaker
from agentspec.run_spec import RunSpec, learned_speculator
from agentspec.runtime.config import ExecutorConfig, SporkConfig
from agentspec.runtime.conversation import User, scripted_turns, steps_trajectory
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.governor.evidence import GovernorConfig
from agentspec.runtime.governor.panel import SpeculatorPanel
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.runtime.modes import Mode, noisy_oracle_p
from agentspec.runtime.policies.llm import LLMPolicy
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.policies.scripted import DONE, NoisyOracleSpeculator, OracleAuthority
from agentspec.runtime.probe import FENCED_OPENING, HERMES_OPENING, LLMProber, Prober, SimulatedProber
from agentspec.runtime.real_time import real_time_backend
from agentspec.runtime.recorded_agent import RecordedAuthority, RecordedUser
from agentspec.runtime.recording import RecordedEpisode, Recording, observation_mismatches
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.runtime.simulated import Role, SimulatedLatency, SimulatedProbeLatency
from agentspec.runtime.summary import aggregate
from agentspec.snapshot import SnapshotBackend
from agentspec.trajectories import trajectory_from_messages
from agentspec.types import TerminationReason, ToolCall, Trajectory


@dataclass
class Parts:
    """What one task's executor runs with, besides its environment."""

    authority: Policy
    speculator: Policy | None = None
    prober: Prober | None = None
    user: User | None = None
    governor: Governor | None = None
    """The mode's governor, which ``speculator`` (then a :class:`SpeculatorPanel`) runs under."""
    on_backend: list[Callable[[SnapshotBackend], None]] = field(default_factory=list)
    """Told the episode's backend once it is open (the learned speculator's look-ahead forks it)."""
    recorded: RecordedEpisode | None = None
    """``--agent replay``: the recorded episode the authority and the user replay."""


@dataclass
class ModeResult:
    episodes: list[Episode | LoggedEpisode]
    wall_s: float
    governor: dict[str, Any] | None = None
    """The governor's report after the mode (:meth:`Governor.report`); None without a governor."""


@dataclass
class Outcome:
    """A finished run: each mode's episodes (modes in the spec's order), the bench, its tasks and the macros."""

    spec: RunSpec
    bench: Bench[Any]
    tasks: list[Any]
    modes: dict[str, ModeResult] = field(default_factory=dict)
    macros: MacroLibrary | None = None
    macros_path: str | None = None
    wall_s: float = 0.0
    virtual_clock: bool = False
    """Whether the run went on trio's virtual clock (simulated models, a latency model, an in-process bench)."""
    data: dict[str, Any] | None = None
    """The bench's data folder, whether it is the pinned release (``data_verified``) and its files' sha256."""

    def results(self) -> Results:
        """The run as :class:`~agentspec.results.Results`: its configuration, its settings and each mode's figures
        (the bench's own too, :class:`~agentspec.bench.protocol.ModeFigures`), every episode's record."""
        spec, bench = self.spec, self.bench
        records = {mode: [e.record() for e in r.episodes] for mode, r in self.modes.items()}  # each built once
        summaries = {mode: _mode_summary(bench, records[mode], r) for mode, r in self.modes.items()}
        summary: dict[str, Any] = {
            "bench": spec.bench or bench.name, "split": (spec.split or bench.default_split) if not spec.task_ids else "task-ids",
            "agent": spec.agent, "speculator": spec.speculator_model, "play": "solo" if is_solo(spec, bench) else "normal",
            "tasks": len(self.tasks), "trials": spec.trials,
            "clock": "virtual (trio MockClock, autojump)" if self.virtual_clock else "wall",
            "latency_model": spec.latency.name if spec.latency else None,
            "models": "replayed from " + spec.replay if spec.replay else ("recorded to " + spec.record if spec.record else "live"),
            "macros": self.macros_path, **(self.data or {}), **_recording_summary(spec, bench),
            "modes": summaries, "speedup_vs_sequential": _speedups(summaries), "run_wall_s": round(self.wall_s, 3),
        }
        return Results.of(spec.model_dump(mode="json"), summary, records)


def _recording_summary(spec: RunSpec, bench: Bench[Any]) -> dict[str, Any]:
    """``--agent replay``: which recorded run played, whose and under which policy."""
    if spec.agent != "replay":
        return {}
    recording = recorded_run(spec, bench)
    return {"recording": {"file": recording.source, "sha256": recording.digest, "agent_model": recording.agent_model,
                          "user_model": recording.user_model, "policy": recording.policy}}


def _mode_summary(bench: Bench[Any], records: list[dict[str, Any]], result: ModeResult) -> dict[str, Any]:
    """One mode's figures: :func:`~agentspec.results.summarize`, the bench's own where it has some, the executor's
    aggregate metrics, and the governor's report when the mode ran under one."""
    own = bench.figures(records) if isinstance(bench, ModeFigures) and records else {}
    metrics = [ExecutionMetrics(**(record.get("execution") or {}).get("metrics", {})) for record in records]
    summary = summarize(records, result.wall_s) | own | aggregate(metrics)
    if result.governor is not None:
        summary["governor"] = result.governor
    return summary


def _speedups(summaries: dict[str, dict[str, Any]]) -> dict[str, float | None] | None:
    """Mean task wall time of sequential over each mode's; None when sequential did not run (or ran no task)."""
    base = summaries.get("sequential", {}).get("mean_task_wall_s")
    if not base:
        return None
    return {mode: round(base / s["mean_task_wall_s"], 4) if s.get("mean_task_wall_s") else None for mode, s in summaries.items()}


# --- one executor -----------------------------------------------------------------------


def executor_config(spec: RunSpec, mode: Mode) -> ExecutorConfig:
    """One task's executor config in ``mode``: the spec's own executor settings (a RunSpec is a
    :class:`~agentspec.runtime.config.LoopSettings`, validated by the same rules), its mode and call limit."""
    return ExecutorConfig.of(spec, mode=mode.base, max_calls=spec.call_limit, speculate_first=spec.record is not None)


def build_loop(spec: RunSpec, mode: Mode, backend: SnapshotBackend, parts: Parts, *, macros: MacroLibrary | None = None,
               log: RunLog | None = None, task_id: str = "task", spork: SporkConfig | None = None) -> ExecutionLoop:
    """The executor for one task in ``mode`` (tools timed by the spec's latency model, if any); ``spork``
    overrides the spec's SPORK settings (``spec.spork``, itself a :class:`SporkConfig`; the Python API passes its
    own)."""
    if mode.spork and parts.prober is None:
        raise ConfigError(f"mode {mode.name} needs a prober (the authority must be a model endpoint or the oracle)")
    for hook in parts.on_backend:
        hook(backend)
    return ExecutionLoop(backend, parts.authority, parts.speculator if mode.speculates else None,
                         config=executor_config(spec, mode), macros=macros if mode.base == "smc" else None,
                         latency=spec.latency, log=log, task_id=task_id, prober=parts.prober if mode.spork else None,
                         spork=spork or spec.spork, user=parts.user,
                         governor=parts.governor if mode.speculates else None)


# --- speculators under the governor -----------------------------------------------------------


def speculator_names(spec: RunSpec) -> list[str]:
    """Each speculator of the spec by what the run calls it (its flag's value), in the order they are asked."""
    names: list[str] = []
    for model in [spec.speculator_model or "speculator", *spec.more_speculators]:
        names.append(model if model not in names else f"{model}#{len(names) + 1}")
    return names


def mode_governor(spec: RunSpec, mode: Mode) -> Governor | None:
    """A governor for ``mode`` when it speculates and the spec wants one (one for every task of the mode)."""
    if not (spec.governor and mode.speculates and spec.cluster is None):
        return None
    # On the virtual clock a model's time comes from the latency model, never from what runs beside it: a
    # speculator there costs the authority nothing, so the governor only reports; holding speculation for a
    # baseline or pausing on noise (decisions differ in length) would only change the run.
    config = GovernorConfig(hold_every=None, pauses=False) if spec.virtual_clock else None
    return Governor(speculator_names(spec), config)


def macros_path(spec: RunSpec) -> str | None:
    """The library smc uses: ``spec.macros``, else the bench's shipped one when a mode is smc."""
    uses = any(m.base == "smc" for m in spec.modes)
    return spec.macros or (str(shipped_macros(spec.bench)) if uses and spec.bench in bench_names() else None)


def load_macros(spec: RunSpec) -> tuple[str | None, MacroLibrary | None]:
    """:func:`macros_path` and the library it names."""
    path = macros_path(spec)
    return path, (MacroLibrary.load(path) if path else None)


# --- one episode's parts ------------------------------------------------------------------


def _oracle_gold(bench: Bench[Any], task: Any, solo: bool) -> list[ToolCall]:
    actions = bench.gold_actions(task)
    if not actions:
        raise ConfigError(f"bench {bench.name} has no gold calls for task {task.id!r}: the oracle agent cannot play it")
    return solo_calls(actions) if solo else scripted_turns(actions)[0]


def model_policy(spec: RunSpec, client: ModelClient, prompt: str, tools: list, *, solo: bool, role: str) -> LLMPolicy:
    """A model in ``role`` (authority or speculator); normal mode's text answers are messages to the user."""
    free = bool(spec.answer_prefix) or not solo
    return LLMPolicy(client, prompt, tools, tool_choice="auto" if free else "required", answer_prefix=spec.answer_prefix,
                     max_tokens=spec.max_tokens, temperature=spec.temperature if spec.temperature is not None else 0.0,
                     queue_extra_calls=role == "authority", conversation=not solo,
                     predicted_hints=role == "authority" and bool(spec.speculator_hints))


def given_policy(spec: RunSpec, given: Policy | PolicyMaker, role: Role, client: ModelClient | None,
                 task: Any) -> Policy:
    """A policy of your own in ``role`` (or made now for ``task`` from the role's ``client``): the scripted oracles
    take the latency model's time (a model's is real)."""
    if isinstance(given, PolicyMaker):
        assert client is not None  # open_roles opened the maker's endpoint under its role
        return given.make(client, task)
    policy = given
    if spec.latency is not None and isinstance(policy, (OracleAuthority, NoisyOracleSpeculator)):
        return SimulatedLatency(policy, spec.latency, role, spec.spork.probe_every if role == "authority" else 1)
    return policy


def assemble(spec: RunSpec, mode: Mode, bench: Bench[Any], task: Any, clients: Mapping[str, ModelClient],
             *, solo: bool, distractors: Sequence[ToolCall] | None = None, trial: int = 0,
             policies: Mapping[str, Policy | PolicyMaker] | None = None, governor: Governor | None = None,
             learner: OnlineLearner | None = None) -> Parts:
    """One episode's parts, whole: authority, speculators, prober and user for ``task`` (its ``trial``) in
    ``mode``, as the spec says.  ``distractors``: the bench's, read once for a whole run by the caller (asked of
    the bench when not given); ``policies``: roles given as policies of your own
    (:attr:`~agentspec.roles.OpenRoles.policies`); ``governor``: the mode's, which the speculators (the spec's
    first and each further one, in the order they are asked) then run under as one :class:`SpeculatorPanel`;
    ``learner``: the mode's online learner, whose tables the first learned speculator answers from."""
    policies = policies or {}
    prompt = bench.system_prompt(task, solo=solo) + (f"\n\n{spec.instructions}" if spec.instructions else "")
    tools = bench.tools(task, solo=solo)
    simulated = spec.latency or LatencyModel()  # scripted models take the latency model's time (none without one)
    oracle = spec.agent == "oracle"
    recorded = recorded_run(spec, bench).episode(task.id, trial) if spec.agent == "replay" else None
    # The calls to come, for a noisy oracle and a simulated prober: the gold ones, or the recording's decisions.
    gold = _oracle_gold(bench, task, solo) if oracle else recorded.decided() if recorded is not None else []
    if distractors is None:
        distractors = bench.distractors() if gold else []
    distractors = list(distractors)
    authority: Policy
    replayed = spec.replay is not None  # a replayed model is simulated too: it takes the latency model's time
    model: LLMPolicy | None = None
    if "agent" in policies:
        authority = given_policy(spec, policies["agent"], "authority", clients.get("agent"), task)
        model = authority if isinstance(authority, LLMPolicy) else None
    elif oracle:
        authority = SimulatedLatency(OracleAuthority(gold), simulated, "authority", spec.spork.probe_every)
    elif recorded is not None:
        authority = recorded_authority(spec, recorded, solo)
    else:
        authority = model = model_policy(spec, clients["agent"], prompt, tools, solo=solo, role="authority")
        if replayed:
            authority = SimulatedLatency(model, simulated, "authority", spec.spork.probe_every)
    parts = Parts(authority, recorded=recorded)

    def speculator(named: str | None, role: str) -> Policy:
        """The speculator ``named`` (a ``--speculator-model`` value) in ``role`` (``speculator``, ``speculatorN``)."""
        learned = learned_speculator(named)
        if learned is not None:
            # Fitted tables, no model: only its measured predict time and its look-ahead calls take clock time.
            fitted, hook = episode_speculator(learned, bench, task, latency=spec.latency, virtual=spec.virtual_clock,
                                              seed=spec.seed, width=max(3, spec.spec_width), solo=solo)
            if learner is not None and role == "speculator":
                fitted.model = learner.model  # this run's tables, updated as its tasks finish
            parts.on_backend.append(hook)
            return fitted
        if role in policies:
            return given_policy(spec, policies[role], "speculator", clients.get(role), task)
        p = noisy_oracle_p(named)
        if p is not None:
            noisy = NoisyOracleSpeculator(gold, p, distractors, task_id=task.id, seed=spec.seed)
            return SimulatedLatency(noisy, simulated, "speculator")
        made = model_policy(spec, clients[role], prompt, tools, solo=solo, role="speculator")
        return SimulatedLatency(made, simulated, "speculator") if replayed else made

    if mode.speculates:
        parts.speculator = speculator(spec.speculator_model, "speculator")
        if governor is not None or spec.more_speculators:
            further = [speculator(named, f"speculator{i}") for i, named in enumerate(spec.more_speculators, 2)]
            members = list(zip(speculator_names(spec), [parts.speculator, *further], strict=True))
            parts.speculator, parts.governor = SpeculatorPanel(members, governor), governor
    if mode.spork:
        if "agent" in policies and model is None:
            raise ConfigError("SPORK probes the authority's own endpoint: give the authority as a ModelConfig")
        if model is None:
            probe = SimulatedProber(gold, spec.spork.probe_accuracy, distractors, task_id=task.id, seed=spec.seed)
            parts.prober = SimulatedProbeLatency(probe, simulated)
        else:
            opening = HERMES_OPENING if spec.spork.probe_opening == "hermes" else FENCED_OPENING
            prober = LLMProber.of(model, opening=opening, max_tokens=spec.spork.probe_tokens)
            parts.prober = SimulatedProbeLatency(prober, simulated) if replayed else prober
    if not solo:
        if recorded is not None:
            parts.user = RecordedUser(recorded, timed=recorded_clock(spec))
        else:
            parts.user = user_of(bench, task, None if oracle else clients["user"])
    return parts


# --- a recorded agent (--agent replay) ---------------------------------------------------------------


def recorded_run(spec: RunSpec, bench: Bench[Any]) -> Recording:
    """The recorded run ``spec.runs`` names, as ``bench`` reads it (read once per run); one ConfigError line when
    the bench reads no recordings or the file is not one."""
    if spec.runs is None:
        raise ConfigError("--agent replay needs --runs FILE")
    if not isinstance(bench, RecordedRuns):
        raise ConfigError(f"{bench.name} reads no recorded runs: --agent replay plays tau2-bench's simulation files")
    recording = bench.read_recording(spec.runs)
    if recording is None:
        raise ConfigError(f"--runs {spec.runs}: not a recorded run {bench.name} reads (tau2-bench's simulation file, "
                          "or a run folder holding its results.json)")
    return recording


def recorded_clock(spec: RunSpec) -> bool:
    """Whether the recorded agent takes its recorded time (``--latency-model recorded``)."""
    return spec.latency is not None and spec.latency.recorded


def recorded_authority(spec: RunSpec, recorded: RecordedEpisode, solo: bool) -> Policy:
    """The recorded agent as the authority: on its own clock (``--latency-model recorded``), on another latency
    model's (each decision timed by its tokens), or taking no time.  In normal mode its decisions start after the
    opening, which no decision makes."""
    timed = recorded_clock(spec)
    if timed:
        recorded.check_timed()
    authority = RecordedAuthority(recorded, timed=timed, offset=0 if solo else 1)
    if timed or spec.latency is None:
        return authority
    return SimulatedLatency(authority, spec.latency, "authority", spec.spork.probe_every)


def replay_jobs(spec: RunSpec, bench: Bench[Any]) -> tuple[list[Any], list[tuple[Any, int]]]:
    """``--agent replay``'s tasks and jobs: each recorded episode (its task and trial), in the recording's order,
    of the tasks ``task_ids`` (or an explicit ``split``) selects, at most ``limit`` tasks."""
    recording = recorded_run(spec, bench)
    ids = recording.task_ids()
    if spec.task_ids:
        missing = [t for t in spec.task_ids if t not in ids]
        if missing:
            raise ConfigError(f"--task-ids: {recording.source} has no episode of {missing[0]!r}")
        ids = list(spec.task_ids)
    elif spec.split is not None:
        in_split = {task.id for task in bench.tasks(spec.split)}
        ids = [t for t in ids if t in in_split]
    ids = ids[: spec.limit] if spec.limit is not None else ids
    if not ids:
        raise ConfigError(f"--runs {recording.source}: no recorded episode of the {spec.split} split's tasks")
    tasks = bench.tasks(spec.split or bench.default_split, ids)
    by_id = {task.id: task for task in tasks}
    jobs = [(by_id[e.task_id], e.trial) for e in recording.episodes if e.task_id in by_id]
    return tasks, jobs


def resolve_replay(spec: RunSpec, bench: Bench[Any]) -> RunSpec:
    """``spec`` with a recorded run's play (solo or with its user) taken from the recording."""
    if spec.agent != "replay":
        return spec
    recording = recorded_run(spec, bench)
    if spec.solo and not recording.solo:
        raise ConfigError(f"--solo: {recording.source} was recorded with a user; its user's side is replayed too "
                          "(drop --solo)")
    return spec.model_copy(update={"solo": recording.solo})


def is_solo(spec: RunSpec, bench: Bench[Any]) -> bool:
    return spec.solo or not has_user(bench)


# --- episodes and modes ----------------------------------------------------------------------


async def run_episode(spec: RunSpec, mode: Mode, bench: Bench[Any], task: Any, parts: Parts, *, trial: int = 0,
                      macros: MacroLibrary | None = None, log: RunLog | None = None,
                      resumed: TaskLog | None = None) -> Episode:
    """One task through the executor, scored by the bench; a failure is recorded in the episode, not raised
    (except a run log that cannot be trusted, which stops the run)."""
    started = time.perf_counter()
    solo = is_solo(spec, bench)
    opening = bench.open_backend(task, solo=solo)
    async with (opening if bench.in_process else real_time_backend(opening)) as backend:
        loop = build_loop(spec, mode, backend, parts, macros=macros, log=log, task_id=f"{task.id}#{trial}")
        if resumed is not None:
            loop.resume(resumed)
        error = evaluation = result = failure = None
        trajectory = Trajectory(task_id=task.id)
        try:
            result = await loop.run()
            trajectory = steps_trajectory(task.id, result.steps, result.termination)
            evaluation = await bench.evaluate(task, result.steps, result.termination, solo=solo, live=backend,
                                              final=result.final)
            if parts.recorded is not None:
                loop.metrics.observe_mismatches(observation_mismatches(parts.recorded, trajectory.messages))
        except ReplayMiss:
            raise  # a replay that lacks an answer replays nothing: the whole run is wrong, not this episode
        except AgentSpecError as exc:
            error, failure = f"{type(exc).__name__}: {exc}", exc
            if not trajectory.messages:  # what was committed before the failure stays in the record
                partial = steps_trajectory(task.id, loop.steps, TerminationReason.AGENT_ERROR)
                trajectory = partial.model_copy(update={"termination": None})
    execution = {
        "mode": mode.name,
        "spork_cost_model": loop.spork.report() if loop.spork is not None else None,
        "metrics": loop.metrics.as_dict(),
        "sources": [s.source for s in loop.steps],
        "macros_fired": sorted({s.macro_id for s in loop.steps if s.macro_id}),
        "timeline": [vars(e) for e in loop.timeline.events],
    }
    if resumed is not None:  # continued from a run log: where (its time is the whole episode's, from the log)
        execution["resumed"] = {"from_step": len(resumed.steps), "at_s": round(resumed.elapsed_s, 6)}
    if parts.recorded is not None:  # what the recording's own evaluator said, beside agentspec's
        recorded = parts.recorded
        execution["recorded"] = {"source": recorded.source, "reward": recorded.reward,
                                 "termination": recorded.termination.value if recorded.termination else None,
                                 "duration_s": recorded.duration_s}
    timings = {"wall_s": time.perf_counter() - started, "simulated_wall_s": loop.metrics.wall_s}
    return Episode(task.id, trial, trajectory, evaluation, timings, error, execution,
                   result=result if failure is None else None, failure=failure)


def online_learner(spec: RunSpec) -> OnlineLearner | None:
    """The run's learner of ``--learn-online`` (on its own copy of the speculator file's tables), else None."""
    if not spec.learn_online or not spec.learned_path:
        return None
    return OnlineLearner(load_speculator(spec.learned_path))


def learn_from(learner: OnlineLearner, bench: Bench[Any], task: Any, episode: Episode) -> None:
    """Update the learner from one finished episode's committed calls: only a solved one (reward 1, as a fit
    from runs takes by default), so a wrong workflow is never learned."""
    if episode.error is not None or episode.reward < 1.0:
        return
    steps = trajectory_from_messages(task.id, episode.trajectory.messages, "online").steps
    learner.learn(task.id, task_text(bench, task), [(call, obs) for call, obs in steps if call.name != DONE])


def select_tasks(spec: RunSpec, bench: Bench[Any]) -> list[Any]:
    return bench.tasks(spec.split or bench.default_split, spec.task_ids, spec.limit)


def resolve_learned(spec: RunSpec, bench: Bench[Any]) -> RunSpec:
    """``spec`` with each plain ``learned`` speculator, the first or a further one, made ``learned:FILE`` of the
    file fitted on ``bench``'s train split (fitted once, then cached)."""
    if not spec.needs_speculator:
        return spec
    fitted: list[str] = []

    def resolved(model: str | None) -> str | None:
        if learned_speculator(model) != "":
            return model
        if not fitted:
            fitted.append(fitted_for(bench))
        return f"learned:{fitted[0]}"

    return spec.model_copy(update={"speculator_model": resolved(spec.speculator_model),
                                   "more_speculators": [resolved(m) or m for m in spec.more_speculators]})


def check_held_out(spec: RunSpec, bench: Bench[Any], tasks: Sequence[Any]) -> None:
    """Refuse a learned speculator fitted on another bench or on any of the run's tasks: its speed-ups there
    would be inflated by what it memorised (one :class:`ConfigError` line)."""
    if not spec.needs_speculator:
        return
    ids = {task.id for task in tasks}
    recording = recorded_run(spec, bench).digest if spec.agent == "replay" else None
    for model in dict.fromkeys([spec.speculator_model, *spec.more_speculators]):
        path = learned_speculator(model)
        if not path:
            continue
        fitted_on = load_speculator(path).fitted_on
        if fitted_on.bench is not None and fitted_on.bench != bench.name:
            raise ConfigError(f"speculator {path} was fitted on bench {fitted_on.bench}, not {bench.name}: fit one on "
                              f"{bench.name}")
        if recording is not None:  # another recording's episodes of the same tasks are fair: leave this one out
            try:
                fitted_on.check_unseen(sorted(ids), recording)
            except ConfigError as exc:
                raise ConfigError(f"speculator {path}: {exc}") from None
            continue
        seen = ids & set(fitted_on.task_ids)
        if seen:
            raise ConfigError(f"{len(seen)} of the run's {len(ids)} tasks are in the fit of speculator {path} "
                              "(fitted_on.task_ids): run held-out tasks (plain `learned` fits on the train split, so "
                              "it cannot run with --split train)")


def bench_data(spec: RunSpec) -> dict[str, Any] | None:
    """:func:`~agentspec.bench.registry.bench_data` of the spec's bench, as the run's summary reports it."""
    return registry_bench_data(spec.bench, spec.data_dir, unverified=spec.unverified_data)
