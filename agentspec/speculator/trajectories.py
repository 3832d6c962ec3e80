"""What a speculator is fitted on: trajectories with their task text and, per step, what look-ahead saw.

Two sources, the same as the miner's (:mod:`agentspec.trajectories`): a split's gold calls, and the successful
episodes of earlier runs (``results.json``), which is how a speculator learns a real authority's own habits.
Either is replayed on a fresh environment of the bench (:func:`replay`): every step gets its real observation,
and before every step the candidate look-ahead calls run in a fork of the state there, so the fit can learn
which of their results predict the next call.  Nothing is run on live state but the trajectory's own calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from agentspec.bench.protocol import solo_calls
from agentspec.runtime.policies import DONE
from agentspec.snapshot import SnapshotBackend
from agentspec.speculator.lookahead import ForkLookahead, Probe, run_probes
from agentspec.speculator.sources import Context, TypedValues
from agentspec.trajectories import MinedTrajectory, deduplicate, read_results
from agentspec.types import Observation, Requestor, ToolCall, ToolSpec

Step = tuple[ToolCall, Observation | None]


@dataclass(frozen=True)
class Trajectory:
    """One task's calls in order with their observations, its task text, and per position (``0..len(steps)``)
    the look-ahead observations there (probe key -> content; empty when none ran)."""

    task_id: str
    text: str
    steps: tuple[Step, ...]
    source: str = ""
    lookahead: tuple[dict[str, str], ...] = ()

    @property
    def calls(self) -> list[ToolCall]:
        return [call for call, _ in self.steps]

    def seen(self, position: int) -> dict[str, str]:
        """What look-ahead saw before the call at ``position`` (empty when it did not run)."""
        return self.lookahead[position] if position < len(self.lookahead) else {}


class TrajectoryBench(Protocol):
    """What fitting needs of a bench (every :class:`agentspec.Bench` has it)."""

    def tasks(self, split: str, task_ids: list[str] | None = ..., limit: int | None = ...) -> list[Any]: ...

    def task(self, task_id: str) -> Any: ...

    def gold_actions(self, task: Any) -> list[tuple[Requestor, ToolCall]]: ...

    def open_backend(self, task: Any, *, solo: bool) -> AbstractAsyncContextManager[SnapshotBackend]: ...

    def system_prompt(self, task: Any, *, solo: bool) -> str: ...

    def tools(self, task: Any, *, solo: bool) -> list[ToolSpec]: ...


def task_text(bench: TrajectoryBench, task: Any) -> str:
    """The task as the solo agent reads it (its system prompt): what a speculator may condition on."""
    return bench.system_prompt(task, solo=True)


async def replay(bench: TrajectoryBench, task: Any, calls: Sequence[ToolCall], *, source: str,
                 probes: Sequence[Probe] = (), typed: TypedValues | None = None) -> Trajectory:
    """``calls`` made in a fresh environment of ``task``, with ``probes`` run in a fork before each of them and
    after the last one."""
    text = task_text(bench, task)
    steps: list[Step] = []
    seen: list[dict[str, str]] = []
    async with bench.open_backend(task, solo=True) as backend:
        look = ForkLookahead(backend)
        for position in range(len(calls) + 1):
            if probes and typed is not None:
                seen.append(await run_probes(probes, Context(text, steps, {}, typed), look))
            if position < len(calls):
                steps.append((calls[position], await backend.execute(calls[position])))
    return Trajectory(task.id, text, tuple(steps), source, tuple(seen))


async def first_observations(bench: TrajectoryBench, tasks: Sequence[Any], probes: Sequence[Probe],
                             typed: TypedValues) -> list[dict[str, str]]:
    """What ``probes`` see at the start of each of ``tasks`` (in a fork of a fresh environment): samples of
    their results, from which chained probes are built."""
    out = []
    for task in tasks:
        async with bench.open_backend(task, solo=True) as backend:
            out.append(await run_probes(probes, Context(task_text(bench, task), [], {}, typed), ForkLookahead(backend)))
    return out


def gold_calls(bench: TrajectoryBench, task: Any) -> list[ToolCall]:
    """The task's reference calls as a solo agent makes them, up to the closing end call (:data:`~agentspec.runtime.policies.DONE`: the end, not a call)."""
    calls = solo_calls(bench.gold_actions(task))
    ends = [i for i, call in enumerate(calls) if call.name == DONE]
    return calls[: ends[0]] if ends else calls


def run_trajectories(folders: Sequence[str], task_ids: set[str], *, min_reward: float = 1.0) -> list[MinedTrajectory]:
    """Successful episodes of earlier runs, restricted to ``task_ids`` (never a task outside the fitted split),
    each episode once."""
    found = [t for folder in folders for t in read_results(folder, min_reward=min_reward)]
    return deduplicate(t for t in found if t.task_id in task_ids)


async def collect(bench: TrajectoryBench, tasks: Sequence[Any], *, gold: bool = True,
                  runs: Sequence[MinedTrajectory] = (), probes: Sequence[Probe] = (),
                  typed: TypedValues | None = None, label: str = "gold") -> list[Trajectory]:
    """Every trajectory to fit on: each task's gold calls (``gold``) and the ``runs`` episodes of those tasks,
    replayed with look-ahead."""
    by_id = {task.id: task for task in tasks}
    out = []
    if gold:
        for task in tasks:
            calls = gold_calls(bench, task)
            if calls:
                out.append(await replay(bench, task, calls, source=label, probes=probes, typed=typed))
    for mined in runs:
        calls = [call for call in mined.calls if call.name != DONE]
        if mined.task_id in by_id and calls:
            out.append(await replay(bench, by_id[mined.task_id], calls, source=mined.source, probes=probes,
                                    typed=typed))
    return out
