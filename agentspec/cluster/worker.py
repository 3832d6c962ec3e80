"""What a Ray worker runs: one episode of a :class:`~agentspec.batch.ModeRun`, logged to its own part file, on
the clock its driver runs on.

:func:`play_episode` is a plain function (the driver wraps it with ``ray.remote``), so it runs and is tested
without a cluster.  It imports nothing from Ray except, to fetch the shared batch once per worker process,
``ray.get`` on an object reference.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentspec.batch import ModeRun, Result, job_key, logged_episode, on_clock
from agentspec.cluster.parts import seed_part
from agentspec.models import ModelClient
from agentspec.run_spec import RunSpec
from agentspec.runtime.runlog import RunLog, TaskLog


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
        return job_key((self.task, self.trial))


_SHARED: dict[str, ModeRun] = {}  # per worker process: a mode's batch is fetched (and its bench opened) once


def shared_run(holder: list[Any]) -> ModeRun:
    """The :class:`ModeRun` behind ``holder[0]`` (an object reference, or the value itself outside Ray)."""
    value = holder[0]
    if isinstance(value, ModeRun):
        return value
    key = value.hex()
    if key not in _SHARED:
        import ray

        _SHARED.clear()  # one mode at a time: drop the previous mode's bench
        _SHARED[key] = ray.get(value)
    return _SHARED[key]


def play_episode(holder: list[Any], job: EpisodeJob) -> Result:
    """Play ``job`` (resuming from its part when an earlier attempt died) on the clock its driver runs on: trio's
    virtual clock when every model is simulated and timed by a latency model."""
    run = shared_run(holder)
    return on_clock(_play, run, job, virtual=run.virtual_clock)


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


async def _play(run: ModeRun, job: EpisodeJob) -> Result:
    logged = _resumed(job)
    if logged is not None and logged.result is not None:  # died after finishing, before handing the result back
        return logged_episode(job.task.id, logged.result)
    log = RunLog(Path(job.part)) if job.part else None
    try:
        async with AsyncExitStack() as stack:
            clients = await _clients(stack, run.spec, run.solo)
            return await run.play((job.task, job.trial), clients, log=log, resumed=logged)
    finally:
        if log is not None:
            log.close()


async def _clients(stack: AsyncExitStack, spec: RunSpec, solo: bool) -> dict[str, ModelClient]:
    """The role clients on this worker (:func:`~agentspec.bench.roles.open_roles`): model endpoints (checked by
    the driver: none is served embedded), or the cassette being replayed (read only when a role needs it)."""
    from agentspec.bench.roles import open_roles, plan_roles, run_roles

    if not plan_roles(spec, run_roles(spec, solo)):
        return {}
    return (await stack.enter_async_context(open_roles(spec, solo=solo))).clients
