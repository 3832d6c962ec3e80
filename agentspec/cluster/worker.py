"""What a Ray worker runs: one episode, logged to its own part file, on the clock a local run would use.

:func:`play_episode` is a plain function (the driver wraps it with ``ray.remote``), so it runs and is tested
without a cluster.  It imports nothing from Ray except, to fetch the shared run parts once per worker process,
``ray.get`` on an object reference.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from agentspec.bench.episode import Episode, LoggedEpisode
from agentspec.bench.protocol import Bench
from agentspec.cluster.parts import seed_part
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.run_spec import RunSpec
from agentspec.runtime.modes import Mode
from agentspec.runtime.runlog import RunLog, TaskLog, data_digest
from agentspec.types import ToolCall


@dataclass(frozen=True)
class Playbook:
    """How the driver's run plays an episode: what it decided (solo play) and the assembly's functions that
    build and play one (:func:`agentspec.assembly.episode_parts` and :func:`~agentspec.assembly.run_episode`) and
    check the run log (:func:`~agentspec.assembly.log_config`,
    :func:`~agentspec.assembly.prior_log`).  Passed in, so this package never imports the assembly that
    dispatches to it; Ray ships the functions by reference."""

    solo: bool
    parts: Callable[..., Any]
    run: Callable[..., Awaitable[Episode]]
    log_config: Callable[..., dict[str, Any]]
    prior_log: Callable[..., dict[str, TaskLog]]


@dataclass(frozen=True)
class Shared:
    """What every episode of one mode shares: put in Ray's object store once, fetched once per worker process."""

    spec: RunSpec
    mode: Mode
    bench: Bench[Any]
    playbook: Playbook
    macros: MacroLibrary | None
    distractors: list[ToolCall]
    virtual_clock: bool = False
    """Whether the driver runs on trio's virtual clock: then each episode does too, so its times match a local run's."""


@dataclass(frozen=True)
class EpisodeJob:
    """One task and trial to play; ``part``: its log file (None without ``--out``); ``seed``: what the run log
    already holds of it, unfinished (written to the part first when the part does not exist)."""

    task: Any
    trial: int
    part: str | None = None
    seed: TaskLog | None = None

    @property
    def key(self) -> str:
        return f"{self.task.id}#{self.trial}"


_SHARED: dict[str, Shared] = {}  # per worker process: a mode's parts are fetched (and the bench opened) once


def shared_parts(holder: list[Any]) -> Shared:
    """The :class:`Shared` behind ``holder[0]`` (an object reference, or the value itself outside Ray)."""
    value = holder[0]
    if isinstance(value, Shared):
        return value
    key = value.hex()
    if key not in _SHARED:
        import ray

        _SHARED.clear()  # one mode at a time: drop the previous mode's bench
        _SHARED[key] = ray.get(value)
    return _SHARED[key]


def play_episode(holder: list[Any], job: EpisodeJob) -> Episode | LoggedEpisode:
    """Play ``job`` (resuming from its part when an earlier attempt died) on the clock a local run would use:
    trio's virtual clock when the driver is on it (every model simulated and timed by a latency model)."""
    shared = shared_parts(holder)
    if shared.virtual_clock:
        from trio.testing import MockClock

        return anyio.run(_play, shared, job, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    return anyio.run(_play, shared, job)


def _resumed(job: EpisodeJob) -> TaskLog | None:
    """What the task's part says (written first from ``job.seed`` when the part is new)."""
    if job.part is None:
        return None
    part = Path(job.part)
    logged = RunLog.read(part).get(job.key) if part.is_file() else None
    if logged is None and job.seed is not None:
        seed_part(part, job.key, job.seed)
        logged = job.seed
    return logged


async def _play(shared: Shared, job: EpisodeJob) -> Episode | LoggedEpisode:
    spec, task, playbook = shared.spec, job.task, shared.playbook
    logged = _resumed(job)
    if logged is not None and logged.result is not None:  # died after finishing, before handing the result back
        stored = logged.result
        return LoggedEpisode(task.id, stored["reward"], stored.get("error"), stored)
    log = RunLog(Path(job.part)) if job.part else None
    try:
        async with AsyncExitStack() as stack:
            clients = await _clients(stack, spec, playbook.solo)
            parts = playbook.parts(spec, shared.mode, shared.bench, task, clients, solo=playbook.solo,
                                   distractors=shared.distractors)
            episode = await playbook.run(spec, shared.mode, shared.bench, task, parts, trial=job.trial,
                                         macros=shared.macros, log=log, resumed=logged)
        if log is not None:
            log.finish(job.key, episode.record(), data_digest(task))
        return episode
    finally:
        if log is not None:
            log.close()


async def _clients(stack: AsyncExitStack, spec: RunSpec, solo: bool) -> dict[str, ModelClient]:
    """The role clients on this worker (:func:`~agentspec.bench.roles.open_roles`): model endpoints (checked by
    the driver: none is served embedded), or the recording being replayed (read only when a role needs it)."""
    from agentspec.bench.roles import open_roles, plan_roles, run_roles

    if not plan_roles(spec, run_roles(spec, solo)):
        return {}
    return (await stack.enter_async_context(open_roles(spec, solo=solo))).clients
