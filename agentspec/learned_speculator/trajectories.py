"""What a speculator is fitted on: trajectories with their task text and, per step, what look-ahead saw.

Two sources, the same as the miner's (:mod:`agentspec.trajectories`): a split's gold calls, and the successful
episodes of earlier runs (``results.json``, or a recording of a real agent), which is how a speculator learns a real
authority's own habits.  Either is replayed on a fresh environment of the bench (:func:`replay`): every step gets
its real observation, and before every step the candidate look-ahead calls run in a fork of the state there, so
the fit can learn which of their results predict the next call.  Nothing is run on live state but the
trajectory's own calls.

A recording made with a user (normal mode) holds the user's calls too (their device checks and fixes, made because
the agent asked): its :func:`solo_view` is every call in the order made, the agent's and the user's, as a solo
agent (gold calls likewise) makes them all.  Replayed so, the state matches the recording's at every step.  Such
an episode is fitted on twice: as that solo view (the user's calls are the workflow a solo agent follows) and as
the agent's own calls alone (:meth:`Trajectory.agent_view`: what a normal-mode agent's history holds when it
decides its next call); a solo recording's own calls are all the agent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentspec.bench.protocol import recording_at, solo_calls
from agentspec.learned_speculator.lookahead import ForkLookahead, Probe, run_probes
from agentspec.learned_speculator.sources import Context, TypedValues
from agentspec.runtime.conversation import SAY
from agentspec.runtime.policies.scripted import DONE
from agentspec.runtime.recording import RecordedEpisode
from agentspec.snapshot import SnapshotBackend
from agentspec.trajectories import MinedTrajectory, deduplicate, read_runs
from agentspec.types import Observation, Requestor, ToolCall, ToolSpec

Step = tuple[ToolCall, Observation | None]
AGENT_VIEW = "#agent"
"""Ends the source of a normal-mode episode's agent view (:meth:`Trajectory.agent_view`) among the trajectories
:func:`collect` returns."""


@dataclass(frozen=True)
class Trajectory:
    """One task's calls in order with their observations, its task text, and per position (``0..len(steps)``)
    the look-ahead observations there (probe key -> content; empty when none ran)."""

    task_id: str
    text: str
    steps: tuple[Step, ...]
    source: str = ""
    lookahead: tuple[dict[str, str], ...] = ()
    agent: tuple[bool, ...] = ()
    """Per step, whether the agent made it (False: the user's call in normal mode); empty: every step."""
    tools: frozenset[str] | None = None
    """The tools the agent had (normal mode: no device tools; None: any): what scoring lets a guess name."""

    @property
    def calls(self) -> list[ToolCall]:
        return [call for call, _ in self.steps]

    def by_agent(self, position: int) -> bool:
        """Whether the call at ``position`` is the agent's (a user's call is history, not a decision to score)."""
        return self.agent[position] if position < len(self.agent) else True

    def agent_view(self) -> Trajectory:
        """The agent's own calls only, as its history shows them in normal mode (the user's calls left out, their
        effects still in the later observations); the trajectory itself when every call is the agent's."""
        if all(self.by_agent(i) for i in range(len(self.steps))):
            return self
        keep = [i for i in range(len(self.steps)) if self.by_agent(i)]
        seen = (*(self.seen(i) for i in keep), self.seen(len(self.steps))) if self.lookahead else ()
        return replace(self, steps=tuple(self.steps[i] for i in keep), lookahead=seen, agent=())

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
                 probes: Sequence[Probe] = (), typed: TypedValues | None = None, agent: Sequence[bool] = (),
                 tools: frozenset[str] | None = None) -> Trajectory:
    """``calls`` made in a fresh environment of ``task``, with ``probes`` run in a fork before each of them and
    after the last one (``agent``: which calls the agent made, see :class:`Trajectory`)."""
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
    return Trajectory(task.id, text, tuple(steps), source, tuple(seen), tuple(agent), tools)


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
    """The task's reference calls as a solo agent makes them, up to the closing end call (:data:`~agentspec.runtime.policies.scripted.DONE`: the end, not a call)."""
    calls = solo_calls(bench.gold_actions(task))
    ends = [i for i, call in enumerate(calls) if call.name == DONE]
    return calls[: ends[0]] if ends else calls


def run_trajectories(folders: Sequence[str], task_ids: set[str], *, min_reward: float | None = None,
                     bench: Any = None) -> list[MinedTrajectory]:
    """Episodes of earlier runs with at least ``min_reward`` (:func:`~agentspec.trajectories.read_runs`' default
    when None), each once: an agentspec run's restricted to ``task_ids`` (never a task outside the fitted split),
    every episode of a recording of a real agent that ``bench`` reads (its tasks are the bench's; a speculator
    scored on one recording is refused when it was fitted on that recording)."""
    found = [t for folder in folders for t in read_runs(folder, bench, min_reward=min_reward)]
    return deduplicate(t for t in found if t.recording is not None or t.task_id in task_ids)


def recorded_episode(bench: Any, mined: MinedTrajectory) -> RecordedEpisode | None:
    """The recorded episode ``mined`` was read from (its source is ``FILE#simulation``), None for an agentspec run's
    episode or where the file no longer holds it."""
    if mined.recording is None or bench is None:
        return None
    path = mined.source.rpartition("#")[0]
    recording = recording_at(bench, path) if path else None
    if recording is None or recording.digest != mined.recording:
        return None
    return next((e for e in recording.episodes if e.source == mined.source), None)


def solo_view(episode: RecordedEpisode) -> list[tuple[ToolCall, bool]]:
    """Every call of a recorded episode in the order made, each with whether the agent made it: in normal mode the
    user's calls of each turn come after the agent's message that turn answers (the first turn answers the
    opening); messages to the user and the end are no calls."""
    out: list[tuple[ToolCall, bool]] = []
    turns = iter(episode.turns)
    if not episode.solo:
        first = next(turns, None)
        out += [(c.call, False) for c in (first.calls if first else ())]
    for decision in episode.decisions:
        if decision.call is None:
            continue
        if decision.call.name == SAY:
            turn = next(turns, None)
            out += [(c.call, False) for c in (turn.calls if turn else ())]
        elif decision.call.name != DONE:
            out.append((decision.call, True))
    return out


def episode_calls(bench: Any, task: Any, mined: MinedTrajectory) -> tuple[list[ToolCall], list[bool], frozenset[str] | None]:
    """The calls to replay for a run's episode, which of them the agent made, and the agent's tools: a recorded
    normal-mode episode's :func:`solo_view` (the agent's calls as recorded, the user's between them; the agent had
    the tools of normal mode), else the episode's own calls (all the agent's, any tool)."""
    own = [call for call in mined.calls if call.name != DONE]
    episode = recorded_episode(bench, mined)
    if episode is None or episode.solo:
        return own, [True] * len(own), None
    view = solo_view(episode)
    if [c.canonical() for c, by_agent in view if by_agent] != [c.canonical() for c in own]:
        return own, [True] * len(own), None  # not the episode it names: its own calls only
    tools = frozenset(spec.name for spec in bench.tools(task, solo=False))
    return [c for c, _ in view], [a for _, a in view], tools


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
        task = by_id.get(mined.task_id) or (bench.task(mined.task_id) if mined.recording is not None else None)
        if task is None:
            continue
        calls, agent, tools = episode_calls(bench, task, mined)
        if calls:
            replayed = await replay(bench, task, calls, source=mined.source, probes=probes, typed=typed, agent=agent,
                                    tools=tools)
            out.append(replayed)
            if not all(agent):  # normal mode: the agent's own history too (what it decided from)
                out.append(replace(replayed.agent_view(), source=f"{mined.source}{AGENT_VIEW}"))
    return out


def episodes(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """The trajectories less the agent views of episodes that are there whole (one per episode fitted on)."""
    return [t for t in trajectories if not t.source.endswith(AGENT_VIEW)]
