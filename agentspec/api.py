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
(any OpenAI-compatible server) or your own :class:`~agentspec.runtime.policies.Policy`; the speculator may also be
a learned one, ``"learned:FILE"`` (a file of ``agentspec speculator fit``: fitted tables, no model), or a list of
speculators asked in turn where the ones before abstain, each under the governor::

    executor = Executor(Shop(), authority=ModelConfig.for_role("agent"),
                        speculator=["learned:runs/spec.json", ModelConfig.for_role("speculator")], spec_width=2)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import anyio

from agentspec import pipeline
from agentspec.assembly import Parts, build_loop
from agentspec.bench.protocol import DONE_WITH_ANSWER, Bench
from agentspec.env import Environment, StateSnapshot, ToolkitEnvironment
from agentspec.errors import ConfigError
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient, ModelConfig
from agentspec.results import Results
from agentspec.run_spec import RunSpec, learned_speculator
from agentspec.runtime.config import MacroCommit, SporkConfig
from agentspec.runtime.executor import CommittedStep, ExecutionResult
from agentspec.runtime.governor import Governor, SpeculatorPanel
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies import LLMPolicy, NoisyOracleSpeculator, OracleAuthority, Policy
from agentspec.runtime.probe import FENCED_OPENING, LLMProber
from agentspec.runtime.runlog import RunLog, TaskLog, locked_out
from agentspec.runtime.simulated import Role, SimulatedLatency
from agentspec.snapshot import InProcessBackend, SnapshotBackend
from agentspec.speculator.runs import learned_speculator_for, model_at
from agentspec.tools import Toolkit, render_result, spec_from_function
from agentspec.types import Effect, Observation, Requestor, TerminationReason, ToolCall, ToolSpec

DEFAULT_PROMPT = (
    "You are an agent that completes the user's task by calling tools, one call per turn. "
    "When the task is complete, call `done` with your final answer."
)
DONE = DONE_WITH_ANSWER


Speculator = ModelConfig | Policy | str
"""One speculator of the Python API: a model endpoint, your own policy, or ``"learned:FILE"``."""


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

    @property
    def metrics(self) -> dict[str, Any]:
        return self.result.metrics.as_dict()


def task_key(task: str) -> str:
    """A task's key in the run log: the sha256 of its whole text (no two tasks share one)."""
    return "task-" + hashlib.sha256(task.encode()).hexdigest()


def _logged_result(logged: TaskLog) -> RunResult:
    """A finished task's result, read back from the run log."""
    steps = logged.committed()
    record = logged.result or {}
    try:
        termination = TerminationReason(record.get("termination", TerminationReason.AGENT_STOP.value))
    except ValueError as exc:
        raise ConfigError(f"the run log's result has an unknown termination: {exc}") from exc
    result = ExecutionResult(steps, termination, ExecutionMetrics(), Timeline(), record.get("note"), record.get("final"))
    answer = record.get("answer")
    return RunResult(steps, str(answer) if answer is not None else None, result)


class Executor:
    """Run tasks with an authoritative model and a speculator.

    Modes: ``sequential``, ``sa``, ``smc``, and ``spork`` or ``X+spork`` (probes of the authority's own
    endpoint, which must be able to continue a final assistant message, as vLLM and ``agentspec serve`` do).

    ``speculator``: a :class:`ModelConfig`, a :class:`Policy`, ``"learned:FILE"`` (a learned speculator: ranked
    guesses from fitted tables in microseconds, its read-only look-ahead run in forks of the environment), or a list
    of them, asked in turn where the ones before abstain.  ``spec_width``: guesses executed per chain position, each
    in its own fork (the head guess and the next ``spec_width - 1`` ranked alternatives).  ``governor``: measure each
    speculator's cost to the authority and its saving across this executor's tasks, and pause one that costs more
    than it saves (:attr:`RunResult.governor` says so).  ``l_min``, ``macro_commit``: SMC's smallest macro commit
    (in skipped decisions) and whether the authority verifies a fired macro's chain (``verified``) or not
    (``trusted``), as ``--l-min`` and ``--macro-commit``; checked by the same rules as :class:`RunSpec`.

    ``log``: a run-log file that makes runs exactly-once across crashes (see :meth:`run`).  The live state is
    checkpointed after every commit as data: the environment's JSON state where it implements
    :class:`agentspec.checkpoint.JsonState`, otherwise its pickled state signed with a per-user key.
    """

    def __init__(
        self,
        env: Any,
        *,
        authority: ModelConfig | Policy,
        speculator: Speculator | Sequence[Speculator] | None = None,
        mode: str = "sa",
        macros: MacroLibrary | str | Path | None = None,
        latency: LatencyModel | str | None = None,
        system_prompt: str = DEFAULT_PROMPT,
        depth: int = 4,
        max_calls: int = 50,
        log: str | Path | None = None,
        spork: SporkConfig | None = None,
        probe_opening: str = FENCED_OPENING,
        spec_width: int = 1,
        governor: bool = True,
        l_min: int = 1,
        macro_commit: MacroCommit = "verified",
    ) -> None:
        self.backend = as_backend(env)
        self.authority, self.speculator = authority, speculator
        self.speculators = _speculator_list(speculator)
        self.mode = Mode.parse(mode)
        if self.mode.speculates and not self.speculators:
            raise ConfigError(f"mode {self.mode.name} needs a speculator")
        self.spec = RunSpec.of(modes=[self.mode], depth=depth, max_calls=max_calls, latency_model=latency,
                               spec_width=spec_width, governor=governor, l_min=l_min, macro_commit=macro_commit)
        self.names = _speculator_names(self.speculators)
        # One governor for every task of this executor: its evidence accumulates across them, as over a CLI mode.
        self.governor = Governor(self.names) if governor and self.mode.speculates and self.speculators else None
        self.spork_config = spork or SporkConfig()
        self.probe_opening = probe_opening
        self.macros = MacroLibrary.load(macros) if isinstance(macros, (str, Path)) else macros
        self.latency = self.spec.latency
        self.system_prompt = system_prompt
        self.log_path = Path(log) if log else None

    async def run(self, task: str, *, task_id: str | None = None) -> RunResult:
        """Work on ``task`` until the authority calls ``done``.

        With ``log``, the run is exactly-once across crashes: a task the log shows finished is not run again
        (its logged result comes back), and an unfinished one continues after its last committed step, from
        the state that step left, so no committed effect is applied twice.  A task is keyed in the log by
        ``task_id``, by default a hash of the whole task text.
        """
        key = task_id or task_key(task)
        logged = RunLog.read(self.log_path).get(key) if self.log_path else None
        if logged is not None and logged.result is not None:
            return _logged_result(logged)
        async with AsyncExitStack() as stack:
            tools = self.backend.tool_specs() + [DONE]
            prompt = f"{self.system_prompt}\n\nTask: {task}"
            authority = await self._policy(self.authority, stack, prompt, tools, "authority")
            prober = None
            if self.mode.spork:
                if not isinstance(authority, LLMPolicy):
                    raise ConfigError("SPORK probes the authority's own endpoint: give the authority as a ModelConfig")
                prober = LLMProber.of(authority, opening=self.probe_opening)
            parts = Parts(authority, prober=prober, governor=self.governor)
            members = [(name, await self._speculator(source, stack, prompt, tools, parts))
                       for name, source in zip(self.names, self.speculators, strict=True)]
            if len(members) == 1 and self.governor is None:
                parts.speculator = members[0][1]
            elif members:
                parts.speculator = SpeculatorPanel(members, self.governor)
            log = RunLog(self.log_path) if self.log_path else None
            if log is not None:
                stack.callback(log.close)
            loop = build_loop(self.spec, self.mode, self.backend, parts, macros=self.macros, log=log, task_id=key,
                              spork=self.spork_config)
            if logged is not None:
                loop.resume(logged)
            result = await loop.run()
            answer = (result.final or {}).get("answer")
            if log is not None:
                log.finish(key, {"answer": answer, "final": result.final, "termination": result.termination.value,
                                 "note": result.note})
        report = self.governor.report() if self.governor is not None else None
        return RunResult(result.steps, str(answer) if answer is not None else None, result, report)

    def run_sync(self, task: str) -> RunResult:
        """:meth:`run` for code that is not async."""
        return anyio.run(self.run, task)

    async def _speculator(self, source: Speculator, stack: AsyncExitStack, prompt: str, tools: list[ToolSpec],
                          parts: Parts) -> Policy:
        """One speculator's policy for a task; a learned one reads the task's prompt and gets look-ahead through
        the task's backend once the loop is built (``parts.on_backend``)."""
        if not isinstance(source, str):
            return await self._policy(source, stack, prompt, tools, "speculator")
        # Validated in __init__: a learned speculator's file.  Its tables are read once per file (model_at).
        speculator, attach = learned_speculator_for(_learned_file(source), prompt, latency=self.latency,
                                                    virtual=False, seed=self.spec.seed,
                                                    width=max(3, self.spec.spec_width))
        parts.on_backend.append(attach)
        return speculator

    async def _policy(self, source: ModelConfig | Policy, stack: AsyncExitStack, prompt: str, tools: list[ToolSpec],
                      role: Role) -> Policy:
        """A model's policy (the authority makes every call of a multi-call answer), or the policy given; the
        scripted oracles take the latency model's time for ``role`` (a model's time is real)."""
        if isinstance(source, ModelConfig):
            client = await stack.enter_async_context(ModelClient(source))
            return LLMPolicy(client, prompt, tools, queue_extra_calls=role == "authority")
        if self.latency is not None and isinstance(source, (OracleAuthority, NoisyOracleSpeculator)):
            stream_every = self.spork_config.probe_every if role == "authority" else 1
            return SimulatedLatency(source, self.latency, role, stream_every)
        return source


def run(spec: RunSpec, bench: Bench[Any] | None = None) -> Results:
    """Run ``spec`` (every mode over the same tasks, see :func:`agentspec.pipeline.run`) and return its
    :class:`~agentspec.results.Results`; with ``spec.out``, also written there (``results.json`` and the bench's
    own formats), as ``agentspec run --out`` writes them.  ``bench``: your own
    :class:`~agentspec.bench.protocol.Bench` object; by default the one registered as ``spec.bench``."""
    outcome = pipeline.run(spec, bench)
    results = outcome.results()
    if spec.out:
        with locked_out(spec.out):  # the run held the folder; so does its last file
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
    for source in listed:
        if isinstance(source, str):
            model_at(_learned_file(source))
    return listed


def _speculator_names(speculators: Sequence[Speculator]) -> list[str]:
    """What the governor's report calls each speculator: a learned one's flag value, a model's name, a policy's
    class; a repeated name gets ``#N``."""
    names: list[str] = []
    for source in speculators:
        name = source if isinstance(source, str) else (
            (source.model or "model") if isinstance(source, ModelConfig) else type(source).__name__)
        names.append(name if name not in names else f"{name}#{len(names) + 1}")
    return names
