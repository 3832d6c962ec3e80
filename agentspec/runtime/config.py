"""The executor's configuration: one set of validated models, shared by the run description and the runtime.

:class:`LoopSettings` holds what a run sets once for the executor of every task and mode (``--depth``,
``--l-min``, ``--macro-commit``...).  :class:`~agentspec.run_spec.RunSpec` *is* a :class:`LoopSettings` (it
inherits these fields), and :class:`ExecutorConfig` is one too, plus what differs per mode and run kind.  So a
value is checked by one rule wherever it enters (a flag, a spec, :class:`agentspec.Executor`, a test's
``ExecutorConfig``), and building a task's config from a spec copies fields, it does not translate them.
:class:`SporkConfig` is SPORK's, and the spec's ``spork`` (:class:`~agentspec.run_spec.SporkSettings`) is one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.errors import ConfigError
from agentspec.runtime.modes import BaseMode

MacroCommit = Literal["verified", "trusted"]
"""SMC's commit of a fired macro: verified by the authority (lossless), or trusted (the paper's)."""


class LoopSettings(BaseModel):
    """The executor's settings a run gives once for all its tasks and modes."""

    model_config = ConfigDict(extra="forbid")

    depth: int = Field(4, ge=1)
    """Drafts the speculator keeps ahead of the committed history."""
    l_min: int = Field(1, ge=1)
    """SMC: the fewest authority decisions a macro commit must skip (every commit skips at least one)."""
    seed: int = Field(0, ge=0)
    """Seeds the simulated tool latencies (and, in a run, noisy oracles and simulated probes)."""
    max_errors: int = Field(10, ge=1)
    """Erroring observations after which a task stops (``too_many_errors``)."""
    verify_macros: bool = False
    """After a macro commit, ask the authority what it would have done at each skipped step and
    update the macro's n, k (online reliability; a macro whose bound falls below tau stops firing)."""
    macro_commit: MacroCommit = "verified"
    """SMC: ``verified`` commits only the prefix of a fired macro's chain the authority verifies (lossless; the
    paper's lossy commit where the authority cannot verify, said in the summary), ``trusted`` the paper's commit."""
    draft_first: bool = False
    """The speculator drafts, the authority verifies, in turn: the authority is asked only once the speculator has
    guessed the next call (or ended its chain), so the guess is a draft hint from its first forward, and the
    speculator waits while the authority decides (so it keeps one guess ahead, whatever ``depth`` says).  For models
    sharing one machine's cores, where decoding both at once slows the authority."""
    spec_width: int = Field(1, ge=1)
    """Guesses executed per chain position: the speculator's head guess and its next ``spec_width - 1`` ranked
    alternatives, each in its own fork (``--spec-width``)."""
    resume_uncertain: Literal["stop", "retry", "skip"] = "stop"
    """Resuming where the environment keeps its effects (an MCP server, a database file): what to do with a call the
    stopped run started and never confirmed (:meth:`agentspec.runtime.journal.Journal.resume`): stop and name it,
    run it again (``--resume-retry-uncertain``), or record it as not done (``--resume-skip-uncertain``)."""

    def loop_settings(self) -> dict[str, Any]:
        """This object's :class:`LoopSettings` fields (a :class:`~agentspec.run_spec.RunSpec` has many more)."""
        return {name: getattr(self, name) for name in LoopSettings.model_fields}


class ExecutorConfig(LoopSettings):
    """One task's executor: the run's :class:`LoopSettings`, its mode and call limit.

    Made with bad values it raises :class:`ConfigError` (one line per problem), as a bad flag or spec does."""

    mode: BaseMode = "sequential"
    max_calls: int = Field(100, ge=1)
    speculate_first: bool = False
    """Let the speculator fill its chain (or end it) before each authority decision.  A recording run does this,
    so that it asks the speculator every context a replay on any clock can ask (greedy models: the same answers)."""

    def __init__(self, **values: Any) -> None:
        _checked(super().__init__, "executor config", values)

    @classmethod
    def of(cls, settings: LoopSettings, *, mode: BaseMode, max_calls: int, speculate_first: bool = False) -> ExecutorConfig:
        """The config of a task in ``mode`` under a run's ``settings`` (a :class:`~agentspec.run_spec.RunSpec`)."""
        return cls(**settings.loop_settings(), mode=mode, max_calls=max_calls, speculate_first=speculate_first)


Probability = Annotated[float, Field(ge=0, le=1)]


class SporkConfig(BaseModel):
    """SPORK's knobs inside the executor (:mod:`agentspec.runtime.spork`); bad values raise :class:`ConfigError`."""

    model_config = ConfigDict(extra="forbid")

    gate: Probability = 0.90
    """A probe's call is dispatched when ``exp(min logprob)`` reaches this."""
    per_tool_gate: dict[str, Probability] = Field(default_factory=dict)
    """Gates for particular tools, overriding ``gate``."""
    probe_every: int = Field(16, ge=1)
    """Authority tokens between probes."""
    cost_model: bool = True
    """Probe and dispatch only where the cost model says it pays."""
    contention: float = Field(1.0, ge=0)
    """The cost model's price of a probe's time against the authority's (1: a probe slows it fully)."""
    forward_hints: bool = True
    """Name the authority's request so probes hand it their text as draft hints (``agentspec serve --decoder toolspec``)."""

    def __init__(self, **values: Any) -> None:
        _checked(super().__init__, "SPORK config", values)

    def gate_for(self, tool: str) -> float:
        return self.per_tool_gate.get(tool, self.gate)


def _checked(init: Any, what: str, values: dict[str, Any]) -> None:
    try:
        init(**values)
    except ValidationError as exc:
        raise ConfigError(f"invalid {what}: {problems(exc)}") from None


def problems(exc: ValidationError) -> str:
    """A validation failure as one line: ``field: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
