"""The seam between a benchmark and agentspec's runs: what a bench provides, nothing about how runs go.

A bench holds domain knowledge only: its tasks (anything with a stable ``id``:
:class:`BenchTask`), a fresh environment per task (as a
:class:`~agentspec.snapshot.SnapshotBackend`), the agent's tools (each with its
effect) and system prompt, the gold calls where it has them, and how an episode
is scored (:class:`Bench`).  The assembly (:mod:`agentspec.assembly`) turns a
:class:`~agentspec.run_spec.RunSpec` and a bench into running episodes in every
mode; no bench builds an executor.

What only some benches have is a protocol of its own, found with ``isinstance``:
a user simulator (:class:`UserSimulator`), figures of their own per mode
(:class:`ModeFigures`), their tools' own output formats (:class:`OfficialOutputs`),
a scorer for answer files (:class:`AnswerScorer`).  A bench *class* registers itself
under the ``agentspec.benches`` entry point group (:mod:`agentspec.bench.registry`),
and what only some classes have is a protocol too: data agentspec pins
(:class:`PinnedData`), a setup step (:class:`SetUp`), a shipped macro library
(:class:`ShippedMacros`).  What every bench shares is
written once here: the ``done`` tool (:func:`done_tool`) and the distractors of
a noisy speculator (:func:`distractors`); an in-process toolkit environment is
:class:`agentspec.env.ToolkitEnvironment`.

Two ways to play a task:

* **solo**: the agent makes every call itself and ends by calling ``done``;
* **normal** (only for a :class:`UserSimulator`): the agent talks to a user
  simulator; a message to the user is the call :data:`~agentspec.runtime.conversation.SAY`,
  answered by the user's turn (its own tool calls, then its reply).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from agentspec.errors import ConfigError
from agentspec.types import Effect, Requestor, Step, TerminationReason, ToolCall, ToolSpec

if TYPE_CHECKING:  # a bench module imports this one: it stays free of the model clients and the runtime
    from agentspec.data import DataSpec
    from agentspec.models import ModelClient
    from agentspec.runtime.conversation import User
    from agentspec.runtime.recording import Recording
    from agentspec.snapshot import SnapshotBackend


class BenchTask(Protocol):
    """A task of a bench: anything with a stable id."""

    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=BenchTask)
T_contra = TypeVar("T_contra", bound=BenchTask, contravariant=True)


@runtime_checkable
class Score(Protocol):
    """An episode's score: a reward in [0, 1] and a JSON record of how it was reached (a pydantic model)."""

    reward: float

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


@runtime_checkable
class Bench(Protocol[T]):
    """A benchmark agentspec can run in every mode (see the module docstring); ``T``: its task type."""

    name: str
    default_split: str
    """The split a run takes when none is named."""
    in_process: bool
    """Whether the environment runs in this process.  A run on the virtual clock opens any other bench's backend
    in real time (:mod:`agentspec.runtime.real_time`): its calls take their real time, and only the simulated
    models' time is virtual."""

    def tasks(self, split: str, task_ids: list[str] | None = None, limit: int | None = None) -> list[T]:
        """The split's tasks (or the given ids, in that order), at most ``limit``; ConfigError on an unknown one."""
        ...

    def task(self, task_id: str) -> T: ...

    def open_backend(self, task: T, *, solo: bool) -> AbstractAsyncContextManager[SnapshotBackend]:
        """A fresh live environment for ``task`` with its initial state, closed (cleaned up) on exit."""
        ...

    def tools(self, task: T, *, solo: bool) -> list[ToolSpec]:
        """The agent's tools with their effects (solo: including the ``done`` tool that ends the task)."""
        ...

    def system_prompt(self, task: T, *, solo: bool) -> str: ...

    def gold_actions(self, task: T) -> list[tuple[Requestor, ToolCall]]:
        """The task's reference calls in order with who makes them (empty when the bench has none)."""
        ...

    def distractors(self) -> list[ToolCall]:
        """Plausible calls for a noisy speculator to get wrong: :func:`distractors` of the bench's gold calls."""
        ...

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        """Task-specific values for macro mining: (slot type, value regex, argument-name regex or None)."""
        ...

    async def evaluate(
        self, task: T, steps: Sequence[Step], termination: TerminationReason, *, solo: bool, live: SnapshotBackend,
        final: dict[str, Any] | None = None,
    ) -> Score:
        """Score a finished episode from its committed steps (``live``: the environment they left; ``final``: the
        arguments of the agent's closing ``done`` call, e.g. its answer)."""
        ...


# --- optional features: each a protocol of its own, found with isinstance ----------------------------


@runtime_checkable
class UserSimulator(Protocol[T_contra]):
    """A bench with normal mode: a user simulator for the agent to talk to.  A bench without one is played solo,
    and needs nothing to say so."""

    def user(self, task: T_contra, client: ModelClient | None) -> User:
        """Normal mode's user simulator: a model's (``client``) or, with ``None``, one that plays the gold
        script's user side."""
        ...


def has_user(bench: Bench[Any]) -> bool:
    """Whether ``bench`` has a normal mode (a :class:`UserSimulator`); otherwise every episode is solo."""
    return isinstance(bench, UserSimulator)


def user_of(bench: Bench[T], task: T, client: ModelClient | None) -> User:
    """``bench``'s user simulator for ``task``; ConfigError for a bench that has none."""
    if not isinstance(bench, UserSimulator):
        raise ConfigError(f"{bench.name} has no user simulator: its episodes are solo")
    simulator: UserSimulator[T] = bench
    return simulator.user(task, client)


@runtime_checkable
class ModeFigures(Protocol):
    """What a bench may add to each mode's figures in a run's summary (GAIA: accuracy by level; AppWorld: TGC and
    SGC), from that mode's episode records (``reward``, ``evaluation``, ...)."""

    def figures(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...


@runtime_checkable
class OfficialOutputs(Protocol):
    """A bench whose own tools can read a run: it writes their formats under a run's ``--out`` folder (tau2's
    simulation results, AppWorld's experiment outputs, GAIA's leaderboard submission)."""

    def write_outputs(self, out: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
        """Write the official files for each mode's episode records (``records``: mode name -> records, as in
        ``results.json``) under ``out``; the paths written."""
        ...


@runtime_checkable
class AnswerScorer(Protocol):
    """A bench whose answers can be scored from a file (``agentspec score``: GAIA's leaderboard submissions)."""

    def score_answers(self, path: str | Path, *, split: str) -> dict[str, Any]:
        """The file's answers (``task_id``, ``model_answer`` per line) scored against the split's references."""
        ...


@runtime_checkable
class RecordedRuns(Protocol):
    """A bench that reads runs recorded by its own tools (tau2's simulation files of real models): their episodes
    are mined and fitted on like agentspec's own runs, re-scored (``agentspec score --runs``) and replayed as a
    recorded agent (``agentspec run --agent replay --runs FILE``)."""

    def read_recording(self, path: str | Path) -> Recording | None:
        """The recording at ``path`` (a file, or a run folder holding one); None when ``path`` is not in the
        bench's own format (an agentspec run); :class:`ConfigError` (one line) when it is but cannot be read."""
        ...


def recording_at(bench: Bench[Any], path: str | Path) -> Recording | None:
    """:meth:`RecordedRuns.read_recording` of ``bench`` (None for a bench that reads no recordings)."""
    return bench.read_recording(path) if isinstance(bench, RecordedRuns) else None


# --- what a registered bench class may have besides ``from_data_dir``: found with isinstance on the class ------


@runtime_checkable
class PinnedData(Protocol):
    """A bench class whose data agentspec fetches and verifies by sha256 (``agentspec data pull --bench NAME``)."""

    data: DataSpec


@runtime_checkable
class SetUp(Protocol):
    """A bench class whose engine needs setting up before its first run (``agentspec bench setup NAME``)."""

    def setup(self, *, venv: str | None = None) -> dict[str, Any]:
        """Make what the bench runs on, idempotently (``venv``: where its own venv goes, for a bench with one);
        a JSON summary of what is there."""
        ...


@runtime_checkable
class ShippedMacros(Protocol):
    """A bench class that ships a macro library (``--mode smc`` loads it when no ``--macros`` is given)."""

    shipped_macros: Path
    """Where the library is; a wheel may not carry it (then ``--macros`` is needed)."""


# --- what every bench shares ---------------------------------------------------------------------------

DONE = "done"
"""The name of the tool a solo episode ends with (the executor ends an episode on it)."""


def done_tool(description: str, *, answer: bool = False, required: Sequence[str] | None = None) -> ToolSpec:
    """The ``done`` tool a solo agent ends its episode with: read-only (ending changes nothing).

    ``answer``: it takes the agent's final answer, a string (``evaluate`` reads it from ``final``);
    ``required``: the arguments its schema lists as required (None: the schema has no ``required`` key).
    Benches word it for their tasks; its schema is part of every prompt, so each keeps the one it has.
    """
    parameters: dict[str, Any] = {"type": "object", "properties": {"answer": {"type": "string"}} if answer else {}}
    if required is not None:
        parameters["required"] = list(required)
    return ToolSpec(name=DONE, description=description, parameters=parameters, effect=Effect.READ_ONLY)


DONE_WITH_ANSWER = done_tool("Finish the task and give the final answer.", answer=True, required=())
"""``done(answer=...)``, the answer optional: the Python API's and the ``mcp`` bench's."""


def distractors(gold: Iterable[ToolCall], *, checks: Iterable[ToolCall] = ()) -> list[ToolCall]:
    """Plausible wrong calls for a noisy speculator (or a simulated prober) to draw from.

    ``checks`` first, one per tool name in name order (calls an agent often makes whatever the task, such as
    read-only status checks), then every distinct ``gold`` call in canonical order; ids ``distractor_0``,
    ``distractor_1``...  The order is part of every seeded draw (published figures), so it never changes.
    """
    by_name: dict[str, ToolCall] = {}
    for call in checks:
        by_name.setdefault(call.name, call)
    distinct: dict[str, ToolCall] = {}
    for call in gold:
        distinct.setdefault(call.canonical(), call)
    ordered = [by_name[name] for name in sorted(by_name)] + [distinct[text] for text in sorted(distinct)]
    return [call.model_copy(update={"id": f"distractor_{i}"}) for i, call in enumerate(ordered)]


def solo_calls(actions: Sequence[tuple[Requestor, ToolCall]]) -> list[ToolCall]:
    """Gold actions as the calls a solo agent makes (all of them, in order, with stable ids)."""
    return [call.model_copy(update={"id": f"gold_{i}"}) for i, (_, call) in enumerate(actions)]
