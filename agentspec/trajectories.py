"""Successful trajectories to mine: from ``results.json`` files and from a split's gold calls.

A mined trajectory is the agent's tool calls in order, each with the
observation it got (``None`` when unknown).  Two sources::

    >>> read_results("runs/oracle-base")        # doctest: +SKIP
    [MinedTrajectory(task_id='[mms_issue]...', source='runs/oracle-base/results.json', steps=(...))]
    >>> gold_trajectories(bench, "train")        # doctest: +SKIP

``read_runs`` reads either kind of run: a recording of a real agent in its bench's own format (tau2's simulation
files: :func:`recorded_trajectories`), or agentspec's own.  ``read_results`` reads a run's ``results.json`` (any format :class:`agentspec.results.Results`
reads).  Only episodes with
``reward >= min_reward`` and no recorded error are kept, and only the
*agent's* calls (a user simulator's calls are not decisions a speculator
makes).  ``gold_trajectories`` replays each task's gold calls in a fresh
environment so every step carries its real observation (data flow from an
observation into a later argument is part of what a macro records).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from agentspec.bench.protocol import recording_at, solo_calls
from agentspec.errors import ConfigError, first_problem
from agentspec.results import PLAIN, Results, results_file
from agentspec.runtime.recording import Recording
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Message, Observation, Requestor, ToolCall

Step = tuple[ToolCall, Observation | None]


@dataclass(frozen=True)
class MinedTrajectory:
    """One successful episode: the agent's calls in order, with their observations."""

    task_id: str
    source: str
    steps: tuple[Step, ...]
    recording: str | None = None
    """The sha256 of the recorded run (a real model's, in its bench's own format) it comes from; None for an
    agentspec run or gold calls."""

    @property
    def calls(self) -> list[ToolCall]:
        return [call for call, _ in self.steps]

    def signature(self) -> tuple[str, ...]:
        """Task id and canonical calls: equal for two replays of the same episode."""
        return (self.task_id, *(call.canonical() for call in self.calls))


class GoldBench(Protocol):
    """What :func:`gold_trajectories` needs from a bench (every :class:`agentspec.Bench` has it)."""

    def tasks(self, split: str, task_ids: list[str] | None = ..., limit: int | None = ...) -> list[Any]: ...

    def gold_actions(self, task: Any) -> list[tuple[Requestor, ToolCall]]: ...

    def open_backend(self, task: Any, *, solo: bool) -> AbstractAsyncContextManager[SnapshotBackend]: ...


def trajectory_from_messages(task_id: str, messages: Sequence[Message], source: str) -> MinedTrajectory:
    """The agent's tool calls of a conversation, each paired with the tool message answering it."""
    answers = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id is not None}
    steps: list[Step] = []
    for message in messages:
        if message.role != "assistant":
            continue
        for call in message.tool_calls:
            answer = answers.get(call.id)
            observation = None
            if answer is not None:
                observation = Observation(call_id=call.id, name=call.name, content=answer.content or "", error=answer.error)
            steps.append((call, observation))
    return MinedTrajectory(task_id, source, tuple(steps))


def read_results(path: str | Path, *, min_reward: float = 1.0) -> list[MinedTrajectory]:
    """Successful trajectories of one run: ``path`` is a run folder or its ``results.json`` (read by
    :meth:`agentspec.results.Results.load`)."""
    results = Results.load(path)
    file = results_file(path)
    plain = list(results.episodes) == [PLAIN]  # the previous format's plain run: its records have no mode
    out = []
    for mode, records in sorted(results.episodes.items()):
        source = str(file) if plain else f"{file}#{mode}"
        for record in records:
            if record.error or record.reward < min_reward:
                continue
            try:
                messages = [Message.model_validate(m) for m in record.messages]
            except ValidationError as exc:
                raise ConfigError(f"{source}: task {record.task_id}: malformed message: {first_problem(exc)}") from exc
            trajectory = trajectory_from_messages(record.task_id, messages, source)
            if trajectory.steps:
                out.append(trajectory)
    return out


def recorded_trajectories(recording: Recording, *, min_reward: float = 1.0) -> list[MinedTrajectory]:
    """The agent's calls of each episode of a recorded run (a real model's, read by its bench) that its own
    evaluator scored at least ``min_reward`` (an unscored one counts 0), with the recording's answers."""
    out = []
    for episode in recording.episodes:
        if (episode.reward or 0.0) < min_reward:
            continue
        trajectory = trajectory_from_messages(episode.task_id, episode.messages, episode.source)
        if trajectory.steps:
            out.append(replace(trajectory, recording=recording.digest))
    return out


RECORDED_MIN_REWARD = 0.0
"""The default ``min_reward`` of a recorded run: a real agent's failed episodes are its behaviour too (what a
speculator of that agent must predict), where an agentspec run's default keeps only solved ones (1.0)."""


def read_runs(path: str | Path, bench: Any = None, *, min_reward: float | None = None) -> list[MinedTrajectory]:
    """The episodes of a run at ``path`` with at least ``min_reward`` (None: 1.0 for an agentspec run,
    :data:`RECORDED_MIN_REWARD` for a recording): a run recorded by ``bench``'s own tools (tau2's simulation files:
    :func:`recorded_trajectories`, marked with the recording's sha256) or an agentspec run (:func:`read_results`)."""
    recording = recording_at(bench, path) if bench is not None else None
    if recording is not None:
        return recorded_trajectories(recording, min_reward=RECORDED_MIN_REWARD if min_reward is None else min_reward)
    return read_results(path, min_reward=1.0 if min_reward is None else min_reward)


async def gold_trajectories(bench: GoldBench, split: str, source: str | None = None) -> list[MinedTrajectory]:
    """Each task's gold calls of ``split``, made by a solo agent in a fresh environment for their observations
    (the bench's own backend: in-process, overlay, Docker...)."""
    out = []
    for task in bench.tasks(split):
        calls = solo_calls(bench.gold_actions(task))
        if not calls:
            continue
        async with bench.open_backend(task, solo=True) as backend:
            observations = [await backend.execute(call) for call in calls]
        out.append(MinedTrajectory(task.id, source or f"gold:{split}", tuple(zip(calls, observations, strict=True))))
    return out


def deduplicate(trajectories: Iterable[MinedTrajectory]) -> list[MinedTrajectory]:
    """Drop repeats of the same task's same calls (a plain and a speculative run of one oracle episode).

    A replayed episode adds no evidence about how the agent works, only
    weight, so it is counted once.
    """
    seen: set[tuple[str, ...]] = set()
    out = []
    for trajectory in trajectories:
        if trajectory.signature() not in seen:
            seen.add(trajectory.signature())
            out.append(trajectory)
    return out
