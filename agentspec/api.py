"""The Python API: your tools, your environment, two model endpoints, one call.

    from agentspec import Executor, ModelConfig, Toolkit, tool

    class Shop(Toolkit):
        def __init__(self) -> None:
            self.cart: list[str] = []

        @tool("read_only")
        def search(self, query: str) -> list[str]:
            \"\"\"Find products.\"\"\"
            ...

        @tool("mutating")
        def add_to_cart(self, item: str) -> str:
            \"\"\"Put an item in the cart.\"\"\"
            ...

    executor = Executor(Shop(), authority=ModelConfig.for_role("agent"),
                        speculator=ModelConfig.for_role("speculator"), mode="sa")
    result = executor.run_sync("Buy a kettle")          # or: await executor.run(...)

The environment can be a :class:`~agentspec.tools.Toolkit` instance (its
state is forked by copying the object), a list of typed functions (stateless
or talking to the outside world: only their ``read_only`` ones are ever run
speculatively), any :class:`~agentspec.env.Environment`, or any
:class:`~agentspec.snapshot.SnapshotBackend` (Docker, overlay filesystem,
SQLite...).  The authority and speculator are :class:`ModelConfig` endpoints
(any OpenAI-compatible server) or your own :class:`~agentspec.runtime.policies.protocol.Policy`; the speculator may also be
a learned one, ``"learned:FILE"`` (a file of ``agentspec speculator fit``: fitted tables, no model), or a list of
speculators asked in turn where the ones before abstain, each under the governor::

    executor = Executor(Shop(), authority=ModelConfig.for_role("agent"),
                        speculator=["learned:runs/spec.json", ModelConfig.for_role("speculator")], spec_width=2)

An executor runs on the pipeline ``agentspec run`` runs on: the environment and the tasks given to it are a bench
(:class:`~agentspec.bench.user_tasks.UserTasks`), its endpoints are opened by
:func:`~agentspec.roles.open_roles`, and each task is one job of :func:`agentspec.batch.run_mode`, with the
same run log, resume, cassette, governor and results.  :func:`run` runs a :class:`RunSpec`; the command line's
``run`` is that function.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import anyio

from agentspec import pipeline
from agentspec.assembly import ModeResult, Outcome, mode_governor
from agentspec.batch import LocalStrategy, ModeRun, job_key, run_mode
from agentspec.bench.episode import Episode, LoggedEpisode
from agentspec.bench.protocol import Bench
from agentspec.bench.user_tasks import DEFAULT_PROMPT, UserTasks, task_key
from agentspec.env import Environment, StateSnapshot, ToolkitEnvironment
from agentspec.errors import ConfigError
from agentspec.learned_speculator.runs import model_at
from agentspec.macros import MacroLibrary
from agentspec.models import ModelConfig
from agentspec.results import Results
from agentspec.roles import GivenRole, OpenRoles, PolicyMaker, open_roles
from agentspec.run_spec import RunSpec, SporkSettings, learned_speculator
from agentspec.runtime.config import MacroCommit, SporkConfig
from agentspec.runtime.executor import CommittedStep, ExecutionResult
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.probe import FENCED_OPENING, HERMES_OPENING
from agentspec.runtime.runlog.lock import locked_out
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.snapshot import InProcessBackend, SnapshotBackend
from agentspec.tools import Toolkit, render_result, spec_from_function
from agentspec.types import Effect, Observation, Requestor, TerminationReason, ToolCall, ToolSpec

__all__ = ["DEFAULT_PROMPT", "Executor", "FunctionEnvironment", "RunResult", "Speculator", "as_backend", "run",
           "task_key"]

Speculator = ModelConfig | Policy | PolicyMaker | str
"""One speculator of the Python API: a model endpoint (a :class:`ModelConfig`, or ``"URL"`` / ``"URL#MODEL"``), your
own policy, or ``"learned:FILE"``."""


class FunctionEnvironment:
    """Plain typed functions as tools.  Their state is outside our reach, so forks cannot isolate them:
    every function not marked ``read_only`` counts as ``external`` and never runs speculatively."""

    def __init__(self, functions: Sequence[Callable[..., Any]]) -> None:
        self.functions = {fn.__name__: fn for fn in functions}
        self.specs = {name: spec_from_function(fn) for name, fn in self.functions.items()}

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return list(self.specs.values())

    def effect(self, name: str) -> Effect:
        spec = self.specs.get(name)
        return Effect.READ_ONLY if spec and spec.effect is Effect.READ_ONLY else Effect.EXTERNAL

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        fn = self.functions.get(call.name)
        try:
            if fn is None:
                raise LookupError(f"Tool '{call.name}' not found.")
            content = render_result(fn(**call.arguments))
        except Exception as exc:  # noqa: BLE001 - a failing tool is an observation
            return Observation(call_id=call.id, name=call.name, content=f"Error: {exc}", error=True, requestor=requestor)
        return Observation(call_id=call.id, name=call.name, content=content, requestor=requestor)

    def snapshot(self) -> StateSnapshot:
        return StateSnapshot(data=b"")

    def restore(self, snapshot: StateSnapshot) -> Self:
        return self  # stateless from our side: read-only calls may share it


def as_backend(env: Any) -> SnapshotBackend:
    """Accept a backend, an environment, a toolkit or a list of functions."""
    if isinstance(env, SnapshotBackend):
        return env
    if isinstance(env, Toolkit):
        return InProcessBackend(ToolkitEnvironment(env))
    if isinstance(env, (list, tuple)) and all(callable(fn) for fn in env):
        return InProcessBackend(FunctionEnvironment(env))
    if isinstance(env, Environment):
        return InProcessBackend(env)
    raise ConfigError(f"cannot use {type(env).__name__} as an environment: give a Toolkit, functions, an Environment or a SnapshotBackend")


@dataclass
class RunResult:
    """What :meth:`Executor.run` returns."""

    steps: list[CommittedStep]
    answer: str | None
    result: ExecutionResult
    governor: dict[str, Any] | None = None
    """The governor's report after this task, over every task of the executor so far (:meth:`Governor.report`: per
    speculator its cost, saving and whether it is paused); None without a governor."""
    episode: Episode | LoggedEpisode | None = None
    """The episode as ``results.json`` records it (reward, timings, the executor's figures and timeline)."""

    @property
    def metrics(self) -> dict[str, Any]:
        return self.result.metrics.as_dict()


def _logged_result(logged: TaskLog, episode: LoggedEpisode) -> RunResult:
    """A finished task's result, read back from the run log."""
    steps = logged.committed()
    record = (episode.stored.get("evaluation") or {})
    try:
        termination = TerminationReason(episode.stored.get("termination") or TerminationReason.AGENT_STOP.value)
    except ValueError as exc:
        raise ConfigError(f"the run log's result has an unknown termination: {exc}") from exc
    result = ExecutionResult(steps, termination, ExecutionMetrics(), Timeline(), None, None)
    answer = record.get("answer")
    return RunResult(steps, str(answer) if answer is not None else None, result, None, episode)


class Executor:
    """Run your tasks with an authoritative model and a speculator, on the same pipeline as ``agentspec run``.

    Modes: ``sequential``, ``sa``, ``smc``, and ``spork`` or ``X+spork`` (probes of the authority's own
    endpoint, which must be able to continue a final assistant message, as vLLM and ``agentspec serve`` do).

    ``authority``: a :class:`ModelConfig` or an endpoint as ``--agent-model`` takes it (``"URL"``,
    ``"URL#MODEL"``): opened once, checked, recorded or replayed like a ``--agent-model`` endpoint; or your own
    :class:`Policy`.  ``speculator``: a :class:`ModelConfig`, an endpoint, a :class:`Policy`, ``"learned:FILE"``
    (a learned speculator: ranked guesses from fitted tables in microseconds, its read-only
    look-ahead run in forks of the environment), or a list of them, asked in turn where the ones before abstain.
    ``spec_width``: guesses executed per chain position, each in its own fork.  ``governor``: measure each
    speculator's cost to the authority and its saving across this executor's tasks, and pause one that costs more
    than it saves (:attr:`RunResult.governor` says so).  ``l_min``, ``macro_commit``: SMC's smallest macro commit
    and whether the authority verifies a fired macro's chain, as ``--l-min`` and ``--macro-commit``.  ``record`` /
    ``replay``: a folder every model response is recorded to, or answered from, as ``--record`` / ``--replay``.

    ``out``: a folder, as ``--out``: its run log (``run-<mode>.log.jsonl``) makes runs exactly-once across crashes
    (see :meth:`run`), and ``results.json`` is written there when the executor closes.  The folder is held by this
    executor while it is open.  The live state is checkpointed after every commit as data: the environment's JSON
    state where it implements :class:`agentspec.checkpoint.JsonState`, otherwise its pickled state signed with a
    per-user key.

    Open it once for many tasks (the endpoints are opened and checked once)::

        async with Executor(Shop(), authority=..., speculator=...) as executor:
            first = await executor.run("Buy a kettle")
            second = await executor.run("Return it")
        executor.results()          # both tasks, as agentspec run's results.json has them

    :meth:`run` outside ``async with`` (and :meth:`run_sync`) opens and closes it around the one task.
    """

    def __init__(
        self,
        env: Any,
        *,
        authority: ModelConfig | Policy | PolicyMaker | str,
        speculator: Speculator | Sequence[Speculator] | None = None,
        mode: str = "sa",
        macros: MacroLibrary | str | Path | None = None,
        latency: LatencyModel | str | None = None,
        system_prompt: str = DEFAULT_PROMPT,
        depth: int = 4,
        max_calls: int = 50,
        out: str | Path | None = None,
        spork: SporkConfig | None = None,
        probe_opening: str = FENCED_OPENING,
        spec_width: int = 1,
        governor: bool = True,
        l_min: int = 1,
        macro_commit: MacroCommit = "verified",
        record: str | Path | None = None,
        replay: str | Path | None = None,
    ) -> None:
        self.backend = as_backend(env)
        self.bench = UserTasks(self.backend, system_prompt=system_prompt)
        self.authority = _endpoint("agent", authority) if isinstance(authority, str) else authority
        self.speculator = speculator
        speculators = _speculator_list(speculator)
        self.mode = Mode.parse(mode)
        if self.mode.speculates and not speculators:
            raise ConfigError(f"mode {self.mode.name} needs a speculator")
        names = [_speculator_name(source) for source in speculators]
        self.given: dict[str, GivenRole] = {"agent": self.authority} | {
            _speculator_role(i): source for i, source in enumerate(speculators, 1) if not isinstance(source, str)}
        self.spec = RunSpec.of(modes=[self.mode], solo=True, depth=depth, max_calls=max_calls, latency_model=latency,
                               spec_width=spec_width, governor=governor, l_min=l_min, macro_commit=macro_commit,
                               speculator_model=names[0] if names else None, more_speculators=names[1:],
                               spork=_spork_settings(spork, probe_opening), out=str(out) if out else None,
                               resume=out is not None, record=str(record) if record else None,
                               replay=str(replay) if replay else None, progress=False)
        self.governor = mode_governor(self.spec, self.mode)
        """One governor for every task of this executor: its evidence accumulates across them, as over a CLI mode."""
        self.macros = MacroLibrary.load(macros) if isinstance(macros, (str, Path)) else macros
        self._stack: AsyncExitStack | None = None
        self._roles: OpenRoles | None = None
        self._episodes: list[Episode | LoggedEpisode] = []
        self._wall_s = 0.0

    @property
    def opened(self) -> bool:
        """Whether the executor is open (inside ``async with``): its endpoints are, and its folder is held."""
        return self._roles is not None

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise ConfigError("this Executor is already open: open it once, then run each task inside")
        stack = AsyncExitStack()
        try:
            if self.spec.out:
                stack.enter_context(locked_out(self.spec.out))
            self._roles = await stack.enter_async_context(open_roles(self.spec, solo=True, given=self.given))
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack, self._roles = self._stack, None, None
        try:
            if self.spec.out and self._episodes:
                self.results().save(self.spec.out, self.bench)
        finally:
            if stack is not None:
                await stack.aclose()

    async def run(self, task: str, *, task_id: str | None = None) -> RunResult:
        """Work on ``task`` until the authority calls ``done``; the episode is played, scored and logged as
        ``agentspec run`` plays a bench's task (one batch of one job).

        With ``out``, the run is exactly-once across crashes: a task the log shows finished is not run again
        (its logged result comes back), and an unfinished one continues after its last committed step, from
        the state that step left, so no committed effect is applied twice.  A task is keyed in the log by
        ``task_id``, by default a hash of the whole task text.  A failure of the episode (a model's malformed
        output, a dead endpoint) is raised.
        """
        if not self.opened:
            async with self:
                return await self._play(task, task_id)
        return await self._play(task, task_id)

    async def _play(self, task: str, task_id: str | None) -> RunResult:
        """One task as one job of the batch layer, on this open executor's roles."""
        assert self._roles is not None
        job = (self.bench.add(task, task_id), 0)
        batch = ModeRun.of(self._roles.spec, self.mode, self.bench, self.macros)
        strategy = LocalStrategy(self._roles.clients, self.governor, policies=self._roles.policies)
        started = time.perf_counter()
        (episode,) = await run_mode(batch, [job], strategy)
        self._wall_s += time.perf_counter() - started
        self._episodes.append(episode)
        if isinstance(episode, Episode) and episode.failure is not None:
            raise episode.failure
        return self._result(episode, job_key(job))

    def run_sync(self, task: str, *, task_id: str | None = None) -> RunResult:
        """:meth:`run` for code that is not async."""
        return anyio.run(functools.partial(self.run, task, task_id=task_id))

    def results(self) -> Results:
        """Every task this executor ran, as :class:`~agentspec.results.Results` (what ``agentspec run`` writes
        to ``results.json``: the spec, the mode's figures, each episode's record)."""
        tasks = [self.bench.task(e.task_id) for e in self._episodes]
        mode = ModeResult(list(self._episodes), self._wall_s, self.governor.report() if self.governor else None)
        return Outcome(self.spec, self.bench, tasks, {self.mode.name: mode}, self.macros, None, self._wall_s).results()

    def _result(self, episode: Episode | LoggedEpisode, key: str) -> RunResult:
        report = self.governor.report() if self.governor is not None else None
        if isinstance(episode, Episode):
            assert episode.result is not None  # a played episode that did not fail has its loop's result
            answer = (episode.result.final or {}).get("answer")
            return RunResult(episode.result.steps, str(answer) if answer is not None else None, episode.result,
                             report, episode)
        path = ModeRun.of(self.spec, self.mode, self.bench).log_path
        assert path is not None  # a logged episode comes from the run log in ``out``
        return _logged_result(RunLog.read(path)[key], episode)


def run(spec: RunSpec, bench: Bench[Any] | None = None, *,
        annotate: Callable[[Results, Outcome], None] | None = None) -> Results:
    """Run ``spec`` (every mode over the same tasks, see :func:`agentspec.pipeline.run`) and return its
    :class:`~agentspec.results.Results`; with ``spec.out``, also written there (``results.json`` and the bench's
    own formats), as ``agentspec run`` writes them, the folder held from the first log record to the last file.
    ``bench``: your own :class:`~agentspec.bench.protocol.Bench` object; by default the one registered as
    ``spec.bench``.  ``annotate``: called with the results and the run's outcome before they are written (the
    command line adds its baseline comparison there)."""
    with locked_out(spec.out) if spec.out else nullcontext():
        outcome = pipeline.run(spec, bench)
        results = outcome.results()
        if annotate is not None:
            annotate(results, outcome)
        if spec.out:
            results.save(spec.out, outcome.bench)
    return results


def _learned_file(source: str) -> str:
    """The file of a ``"learned:FILE"`` speculator; :class:`ConfigError` for any other text."""
    path = learned_speculator(source)
    if path is None:
        raise ConfigError(f"speculator {source!r}: a text speculator is a learned one, 'learned:FILE'; give a model "
                          "as a ModelConfig")
    if not path:
        raise ConfigError("plain 'learned' fits on a bench's train split, and the Python API has none: fit a file "
                          "with `agentspec speculator fit` and give 'learned:FILE'")
    return path


def _speculator_list(speculator: Speculator | Sequence[Speculator] | None) -> list[Speculator]:
    """The speculators in the order they are asked, each learned one's file read now (a bad one fails here)."""
    if speculator is None:
        return []
    listed = list(speculator) if isinstance(speculator, Sequence) and not isinstance(speculator, str) else [speculator]
    listed = [_endpoint("speculator", s) if isinstance(s, str) and s.startswith(URL_PREFIXES) else s for s in listed]
    for source in listed:
        if isinstance(source, str):
            model_at(_learned_file(source))
    return listed


URL_PREFIXES = ("http://", "https://")


def _endpoint(role: str, text: str) -> ModelConfig:
    """An endpoint given as text, as ``--ROLE-model`` takes it: ``URL`` or ``URL#MODEL``."""
    if not text.startswith(URL_PREFIXES):
        raise ConfigError(f"{role} {text!r}: give an endpoint as URL or URL#MODEL, a ModelConfig, or a Policy")
    return ModelConfig.for_role(role, text, env={})


def _speculator_name(source: Speculator) -> str:
    """What the run calls a speculator (the governor's report, the spec): a learned one's ``learned:FILE``, a
    model's name, a policy's class (a repeated name gets ``#N`` there)."""
    if isinstance(source, str):
        return source
    if isinstance(source, ModelConfig | PolicyMaker):
        config = source if isinstance(source, ModelConfig) else source.config
        return config.model or "model"
    return type(source).__name__


def _speculator_role(position: int) -> str:
    """The role of the speculator asked ``position``-th: ``speculator``, then ``speculator2``..."""
    return "speculator" if position == 1 else f"speculator{position}"


def _spork_settings(spork: SporkConfig | None, opening: str) -> SporkSettings:
    """The spec's SPORK settings from the API's: its knobs, and the opening text as the spec names it."""
    openings = {FENCED_OPENING: "fenced", HERMES_OPENING: "hermes"}
    if opening not in openings:
        raise ConfigError("probe_opening: give agentspec.runtime.probe.FENCED_OPENING or HERMES_OPENING")
    return SporkSettings(**(spork or SporkConfig()).model_dump(), probe_opening=openings[opening])
