"""What one run is: a typed, validated description every entry point builds, and :mod:`agentspec.assembly` runs.

``agentspec run``, ``agentspec mine``, :class:`agentspec.Executor` and the
experiments each describe their run as a :class:`RunSpec`; nothing else turns
settings into an executor.  Modes are parsed once, here::

    >>> RunSpec(bench="tau2-telecom", agent="oracle", modes="sequential,smc+spork", speculator_model="learned").modes
    [Mode(base='sequential', spork=False), Mode(base='smc', spork=True)]

A spec is checked as a whole when it is made (a noisy-oracle speculator needs
the oracle agent's gold calls, ``resume`` needs ``out``...): a bad one raises
:class:`~agentspec.errors.ConfigError` before any task starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from agentspec.errors import ConfigError
from agentspec.runtime.config import LoopSettings, SporkConfig
from agentspec.runtime.latency import LatencyModel, tool_latency
from agentspec.runtime.modes import Mode, noisy_oracle_p, parse_modes


class SporkSettings(SporkConfig):
    """SPORK's knobs (a :class:`~agentspec.runtime.config.SporkConfig`, which the executor takes as it is) and how
    its probes are made."""

    probe_accuracy: float = Field(0.9, ge=0, le=1)
    """With the oracle agent: the simulated probe's hit rate."""
    probe_opening: Literal["fenced", "hermes"] = "fenced"
    probe_tokens: int = Field(48, ge=1)


class RunSpec(LoopSettings):
    """Everything one run needs: bench and tasks, who plays each role, the modes and their settings, the output.

    The executor's settings (``depth``, ``l_min``, ``seed``, ``max_errors``, ``verify_macros``, ``macro_commit``,
    ``draft_first``, ``spec_width``) are inherited from :class:`~agentspec.runtime.config.LoopSettings`: the
    executor's config is made of these very fields, validated once."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    bench: str | None = None
    """A registered bench (``tau2-telecom``, ``workspace-demo``); None for the Python API's own environment."""
    data_dir: str | None = None
    unverified_data: bool = False
    """Run data that is not the pinned release (``--unverified-data``): one warning, ``data_verified: false``."""
    backend: str | None = None
    """The bench's environment backend where it offers several (``overlay``, ``copy``, ``docker``)."""
    bench_options: dict[str, Any] = Field(default_factory=dict)
    """The bench's own settings (GAIA: ``levels`` such as ``"1,2"``, ``search`` backend name)."""
    split: str | None = None
    """None: the bench's default split."""
    task_ids: list[str] | None = None
    limit: int | None = Field(None, ge=1)
    trials: int = Field(1, ge=1)
    solo: bool = False
    """No user simulator: the agent makes every call and ends with ``done`` (a bench without a user is always solo)."""

    agent: Literal["oracle", "llm", "replay"] = "llm"
    """Who decides: a model (``llm``), the gold calls (``oracle``), or a recorded run of a real agent (``replay``:
    ``runs`` names it; its user's side is replayed too)."""
    runs: str | None = None
    """``--agent replay``: the recorded run it replays (a file in the bench's own format, e.g. tau2's simulations);
    its tasks and trials are the run's unless ``task_ids``/``split``/``limit`` narrow them."""
    agent_model: str | None = None
    agent_base_url: str | None = None
    user_model: str | None = None
    user_base_url: str | None = None
    speculator_model: str | None = None
    """A model (endpoint URL, URL#MODEL, a name at ``speculator_base_url``, a local name), ``noisy-oracle:P``, or a
    learned speculator (``learned:FILE``, or ``learned`` to fit one on the bench's train split)."""
    speculator_base_url: str | None = None
    more_speculators: list[str] = Field(default_factory=list)
    """Further speculators (``--speculator-model`` given again), each asked in turn where the ones before it abstain
    (answer no call); every one under the governor."""
    learn_online: bool = False
    """With a learned speculator: update its counts from each finished task of the run (``--learn-online``;
    :mod:`agentspec.learned_speculator.online`), each speculating mode from the file afresh."""
    save_speculator: str | None = None
    """Where to write the learned speculator as ``--learn-online`` left it (the last speculating mode's)."""
    governor: bool = True
    """Measure each speculator's cost to the authority and its saving during the run, and pause one that costs
    more than it saves (:mod:`agentspec.runtime.governor`)."""
    temperature: float | None = Field(None, ge=0)
    instructions: str = ""
    """Text appended to the bench's system prompt (e.g. asking the model to think before each call)."""
    answer_prefix: str = ""
    speculator_hints: bool | None = None
    """Send the speculator's next call with each authority request as a draft hint for the ToolSpec decoder.  None:
    only to a local model agentspec serves (another server may refuse the unknown field)."""
    max_tokens: int | None = Field(None, ge=1)

    modes: list[Mode] = Field(default_factory=lambda: [Mode()])
    max_steps: int = Field(200, ge=1)
    """Messages per episode (tau2's step limit); the executor makes at most (max_steps - 1) // 2 calls."""
    max_calls: int | None = Field(None, ge=1)
    """Overrides the call limit derived from ``max_steps``."""
    macros: str | None = None
    """Macro library for smc; None takes the bench's shipped library when a mode is smc."""
    latency_model: str | LatencyModel | None = None
    tool_latency: float | str | None = None
    """``--tool-latency``: every tool's time in seconds, or a preset's tool times, over the latency model's own."""
    spork: SporkSettings = Field(default_factory=SporkSettings)

    record: str | None = None
    """Store every model response in this folder (``responses.jsonl``) for a later ``replay``."""
    replay: str | None = None
    """Answer every model request from a recording in this folder; no model runs, and with a latency model the
    run takes the virtual clock, timed by the recorded token counts."""

    concurrency: int = Field(1, ge=1)
    cluster: str | None = None
    """Run each episode as a task on this Ray cluster (the head's ``HOST:PORT``, or ``"default"``: the one
    ``RAY_ADDRESS`` or a running local cluster names, else a new one here); None: in this process, Ray not imported."""
    out: str | None = None
    resume: bool = False
    overwrite: bool = False
    """Start afresh over the run logs an earlier run left in ``out`` (without it, or ``resume``, they are refused)."""
    progress: bool = True

    @classmethod
    def of(cls, **fields: Any) -> RunSpec:
        """Build a spec, turning a validation failure into one :class:`ConfigError` line per problem."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            ours = [e["ctx"]["error"] for e in exc.errors() if isinstance(e.get("ctx", {}).get("error"), ConfigError)]
            if ours:
                raise ours[0] from None  # a whole-spec check: its own message says what to do
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid run: {problems}") from exc

    @field_validator("modes", mode="before")
    @classmethod
    def _parse_modes(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_modes(value)
        return [Mode.parse(v) if isinstance(v, str) else v for v in value]

    @field_validator("cluster")
    @classmethod
    def _check_cluster(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ConfigError("--ray ADDRESS is empty: give the head node's HOST:PORT, or --ray alone")
        return value.strip() if value is not None else None

    @field_validator("latency_model", mode="before")
    @classmethod
    def _load_latency(cls, value: Any) -> Any:
        return LatencyModel.load(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _tool_times(self) -> RunSpec:
        if self.tool_latency is None:
            return self
        if not isinstance(self.latency_model, LatencyModel):
            raise ConfigError("--tool-latency times tools on a latency model's clock: pass --latency-model too")
        tools = tool_latency(self.tool_latency)
        if self.latency_model.tool != tools:
            self.latency_model = self.latency_model.model_copy(update={"tool": tools})
        return self

    @model_validator(mode="after")
    def _coherent(self) -> RunSpec:
        noisy = self.noisy_p  # raises on a bad P
        if noisy is not None and self.agent == "llm":
            raise ConfigError("noisy-oracle speculators need the gold calls (--agent oracle) or a recording's calls "
                              "(--agent replay) to know the next call")
        self._check_replay()
        # The Python API (no bench) passes its policies itself; a bench run needs the speculator named.
        if self.bench is not None and self.needs_speculator and noisy is None and not self.role_named("speculator"):
            raise ConfigError("modes sa and smc need --speculator-model (a model, or noisy-oracle:P with --agent oracle)")
        if self.resume and not self.out:
            raise ConfigError("--resume needs --out DIR (the run log lives there)")
        if self.resume_uncertain != "stop" and not self.resume:
            raise ConfigError(f"--resume-{self.resume_uncertain}-uncertain says how to resume: pass --resume too")
        if self.resume and self.overwrite:
            raise ConfigError("--resume continues the logged run, --overwrite discards it: pass one of them")
        if self.record and self.replay:
            raise ConfigError("--record and --replay exclude each other: record once, then replay")
        if (self.learn_online or self.save_speculator) and self.learned_path is None:
            raise ConfigError("--learn-online and --save-speculator need a learned speculator (--speculator-model learned:FILE)")
        if self.learn_online and self.trials > 1:
            raise ConfigError("--learn-online with --trials > 1 would learn a task from its own earlier trial: run one trial")
        if self.learn_online and self.resume:
            raise ConfigError("--learn-online cannot --resume: the logged tasks are skipped, so nothing is learned from them")
        if self.save_speculator and not self.learn_online:
            raise ConfigError("--save-speculator writes what --learn-online learned: pass --learn-online too")
        return self

    def _check_replay(self) -> None:
        replay = self.agent == "replay"
        if replay and not self.runs:
            raise ConfigError("--agent replay plays a recorded run: give it with --runs FILE")
        if self.runs and not replay:
            raise ConfigError("--runs names the recorded run --agent replay plays: pass --agent replay")
        if self.latency is not None and self.latency.recorded and not replay:
            raise ConfigError("--latency-model recorded is a recording's own clock: it times --agent replay only")
        if not replay:
            return
        if any(m.spork for m in self.modes):
            raise ConfigError("SPORK probes the authority's own unfinished answer, which a recorded agent does not "
                              "have: run --agent replay in sequential, sa or smc")
        if self.macro_commit != "verified" and any(m.base == "smc" for m in self.modes):
            raise ConfigError("a recorded agent's decisions cannot change, so smc must verify each chain against it: "
                              "drop --macro-commit trusted")
        if self.record or self.replay:
            raise ConfigError("--agent replay runs no model: --record and --replay (a model cassette) do not apply")

    # --- derived facts ----------------------------------------------------------------

    @property
    def noisy_p(self) -> float | None:
        return noisy_oracle_p(self.speculator_model)

    @property
    def needs_speculator(self) -> bool:
        return any(m.speculates for m in self.modes)

    @property
    def call_limit(self) -> int:
        return self.max_calls or max(1, (self.max_steps - 1) // 2)

    @property
    def latency(self) -> LatencyModel | None:
        return self.latency_model if isinstance(self.latency_model, LatencyModel) else None

    @property
    def virtual_clock(self) -> bool:
        """Every model is simulated (scripted, or replayed from a recording) and a latency model times them: run on
        trio's virtual clock."""
        speculators = [self.speculator_model, *self.more_speculators]
        simulated = all(noisy_oracle_p(s) is not None or learned_speculator(s) is not None for s in speculators)
        scripted = self.agent in ("oracle", "replay") and (simulated or not self.needs_speculator)
        return self.latency is not None and (scripted or self.replay is not None)

    @property
    def learned_path(self) -> str | None:
        """The speculator file of ``--speculator-model learned:FILE`` (``""`` for plain ``learned``: fit on the
        bench's train split); None when the speculator is not a learned one."""
        return learned_speculator(self.speculator_model)

    def result_settings(self, mode: Mode, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
        """The settings that decide ``mode``'s results, as JSON: what a run log's header records, so ``--resume``
        under other settings is refused.

        Every field counts unless it only says where output goes or how the run is spread (:data:`NOT_RESULTS`),
        so a new field is covered by default; settings ``mode`` does not use are left out (a sequential log does not
        depend on the speculator), the models the environment names count like flags, and which tasks run does not
        count (a resume may run more or fewer; each task's data is checked on its own record)."""
        settings = self.model_dump(mode="json", exclude=set(NOT_RESULTS))
        settings["mode"] = mode.name
        settings["recording"] = self.record is not None  # the speculator fills its chain first when recording
        for role in ("agent", "user", "speculator"):
            settings[f"{role}_model"] = getattr(self, f"{role}_model", None) or env.get(role_prefix(role) + "MODEL")
        if not mode.speculates:
            for name in SPECULATION_ONLY:
                settings.pop(name, None)
        if not mode.spork:
            settings.pop("spork", None)
        else:  # the knobs only the Python API sets count once set (logs from before they were spec fields lack them)
            defaults = SporkConfig().model_dump(mode="json")
            for name in RUNTIME_ONLY_SPORK:
                if settings["spork"].get(name) == defaults[name]:
                    del settings["spork"][name]
        if mode.base != "smc":
            for name in ("macros", "verify_macros", "l_min", "macro_commit"):
                settings.pop(name, None)
        return settings

    def role_named(self, role: str) -> bool:
        """Whether a model is named for ``role`` here or in ``AGENTSPEC_<ROLE>_MODEL/BASE_URL``."""
        return role_given(self, role)


NOT_RESULTS = frozenset({
    "out", "resume", "overwrite", "progress", "concurrency", "cluster", "record", "replay", "runs", "modes", "data_dir",
    "task_ids", "split", "limit", "trials", "agent_base_url", "user_base_url", "speculator_base_url",
    "speculator_hints", "save_speculator", "resume_uncertain",
})
"""RunSpec fields that do not change a task's result: where output and models live, how the run is spread, which
tasks run, whether the authority gets draft hints (a hint changes its speed, never its output; and None is only
resolved once the models are planned).  ``replay`` changes results through the recording, which the run's caller
hashes (as it does the recorded run ``runs`` names); ``data_dir`` through the tasks' data, hashed per task."""

RUNTIME_ONLY_SPORK = ("per_tool_gate", "contention", "forward_hints")
"""SPORK settings no flag sets (only the Python API passes them, in its own :class:`SporkConfig`)."""

SPECULATION_ONLY = ("speculator_model", "more_speculators", "speculator_hints", "draft_first", "depth", "spec_width",
                    "governor", "learn_online")
"""Settings only a speculating mode uses."""


LEARNED = "learned"
"""``--speculator-model learned:FILE`` (a file of ``agentspec speculator fit``) or plain ``learned`` (fitted on the
bench's train split for the run, cached): a speculator fitted on past trajectories, no model."""


def learned_speculator(value: str | None) -> str | None:
    """The file of a ``learned:FILE`` speculator, ``""`` for plain ``learned``, None for any other value.

        >>> learned_speculator("learned:runs/spec.json"), learned_speculator("learned"), learned_speculator("qwen")
        ('runs/spec.json', '', None)
    """
    if value == LEARNED:
        return ""
    if value and value.startswith(LEARNED + ":"):
        path = value[len(LEARNED) + 1:]
        if not path:
            raise ConfigError("--speculator-model learned:FILE needs the file (or plain `learned` to fit one)")
        return path
    return None


def role_prefix(role: str) -> str:
    """The environment variables' prefix for ``role`` (``AGENTSPEC_SPECULATOR_``)."""
    return "AGENTSPEC_" + role.upper().replace("-", "_") + "_"


def role_given(settings: Any, role: str, env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``settings`` (a :class:`RunSpec` or parsed flags) or the environment names a model for ``role``."""
    prefix = role_prefix(role)
    return bool(getattr(settings, f"{role}_model", None) or getattr(settings, f"{role}_base_url", None)
                or env.get(prefix + "MODEL") or env.get(prefix + "BASE_URL"))
