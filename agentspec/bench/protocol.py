"""The seam between a benchmark and agentspec's runs: what a bench provides, nothing about how runs go.

A bench holds domain knowledge only: its tasks, a fresh environment per task
(as a :class:`~agentspec.snapshot.SnapshotBackend`), the agent's tools (each
with its effect) and system prompt, the gold calls where it has them, an
optional user simulator, and how an episode is scored.  The assembly
(:mod:`agentspec.assembly`) turns a :class:`~agentspec.run_spec.RunSpec` and a
bench into running episodes in every mode; no bench builds an executor.

Two ways to play a task:

* **solo**: the agent makes every call itself and ends by calling ``done``;
* **normal** (only where ``has_user`` is true): the agent talks to a user
  simulator; a message to the user is the call :data:`~agentspec.runtime.conversation.SAY`,
  answered by the user's turn (its own tool calls, then its reply).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentspec.models import ModelClient
from agentspec.runtime.conversation import User
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Requestor, Step, TerminationReason, ToolCall, ToolSpec

T = TypeVar("T")


class BenchTask(Protocol):
    """A task of a bench: anything with a stable id."""

    @property
    def id(self) -> str: ...


@runtime_checkable
class Score(Protocol):
    """An episode's score: a reward in [0, 1] and a JSON record of how it was reached (a pydantic model)."""

    reward: float

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


@runtime_checkable
class Bench(Protocol[T]):
    """A benchmark agentspec can run in every mode (see the module docstring)."""

    name: str
    has_user: bool
    """Whether normal mode exists (a user simulator to talk to); otherwise every episode is solo."""
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
        """Plausible calls for a noisy speculator to get wrong (every distinct gold call, say)."""
        ...

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        """Task-specific values for macro mining: (slot type, value regex, argument-name regex or None)."""
        ...

    def user(self, task: T, client: ModelClient | None) -> User:
        """Normal mode's user simulator: a model's (``client``) or, with ``None``, one that plays the gold
        script's user side.  Only called where ``has_user``."""
        ...

    async def evaluate(
        self, task: T, steps: Sequence[Step], termination: TerminationReason, *, solo: bool, live: SnapshotBackend,
        final: dict[str, Any] | None = None,
    ) -> Score:
        """Score a finished episode from its committed steps (``live``: the environment they left; ``final``: the
        arguments of the agent's closing ``done`` call, e.g. its answer)."""
        ...


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


def solo_calls(actions: Sequence[tuple[Requestor, ToolCall]]) -> list[ToolCall]:
    """Gold actions as the calls a solo agent makes (all of them, in order, with stable ids)."""
    return [call.model_copy(update={"id": f"gold_{i}"}) for i, (_, call) in enumerate(actions)]
