"""What a Ray worker runs: one episode of a :class:`~agentspec.batch.ModeRun`, logged to its own part file, on
the clock its driver runs on, in an event loop and with role clients the worker opens once per mode
(:class:`WorkerLoop`), not once per episode.

:func:`play_episode` is a plain function (the driver wraps it with ``ray.remote``), so it runs and is tested
without a cluster.  It imports nothing from Ray except, to fetch the shared batch once per worker process,
``ray.get`` on an object reference.
"""

from __future__ import annotations

import atexit
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal

from agentspec.batch import ModeRun, Result, job_key, logged_episode
from agentspec.cluster.parts import seed_part
from agentspec.models import ModelClient
from agentspec.run_spec import RunSpec
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog


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


class WorkerLoop:
    """This worker process's event loop (a thread of its own, on the clock the driver runs on) and the role clients
    opened on it: made for a mode's first episode here and kept for every later one of that mode."""

    def __init__(self, run: ModeRun) -> None:
        self._stack = ExitStack()
        self.closed = False
        try:
            if run.virtual_clock:
                from trio.testing import MockClock

                options = {"clock": MockClock(autojump_threshold=0)}
                self.portal = self._stack.enter_context(start_blocking_portal("trio", options))
            else:
                self.portal = self._stack.enter_context(start_blocking_portal())
            self.clients = self._stack.enter_context(self.portal.wrap_async_context_manager(_roles(run.spec, run.solo)))
        except BaseException:
            self._stack.close()
            raise

    def play(self, run: ModeRun, job: EpisodeJob) -> Result:
        """``job`` played on this loop.  An episode's own failure leaves the loop as it is; an interruption (the
        driver cancelling the task) stops it, so nothing of the episode runs on beside the next one."""
        try:
            return self.portal.call(_play, run, job, self.clients)
        except Exception:
            raise
        except BaseException:
            self.close(cancel=True)
            raise

    def close(self, *, cancel: bool = False) -> None:
        """Stop the loop (``cancel``: cancelling what still runs on it) and close the clients."""
        self.closed = True
        if not cancel:
            self._stack.close()
            return
        with suppress(RuntimeError):  # already stopped
            self.portal.call(self.portal.stop, True)
        with suppress(RuntimeError):  # a stopped portal runs nothing more: the clients' exit cannot run on it
            self._stack.close()


_SHARED: dict[str, tuple[ModeRun, WorkerLoop]] = {}  # per worker process: one mode's batch, fetched once, and its loop


@atexit.register
def close_loops() -> None:
    """Stop this process's loop while its thread can still run: left to the interpreter's last collection, the
    portal's stop would wait forever on a thread the interpreter has already frozen."""
    for _, loop in _SHARED.values():
        if not loop.closed:
            loop.close()
    _SHARED.clear()


def shared_run(holder: list[Any]) -> tuple[ModeRun, WorkerLoop]:
    """The :class:`ModeRun` behind ``holder[0]`` (an object reference, or the value itself outside Ray) and this
    process's loop for it (its bench opened, its roles opened, once per process and mode)."""
    value = holder[0]
    key = f"local-{id(value)}" if isinstance(value, ModeRun) else value.hex()
    if key not in _SHARED:
        for _, loop in _SHARED.values():  # one mode at a time: drop the previous mode's bench and clients
            loop.close()
        _SHARED.clear()
        if isinstance(value, ModeRun):
            run = value
        else:
            import ray

            run = ray.get(value)
        _SHARED[key] = (run, WorkerLoop(run))
    return _SHARED[key]


def play_episode(holder: list[Any], job: EpisodeJob) -> Result:
    """Play ``job`` (resuming from its part when an earlier attempt died) on this worker's loop, on the clock its
    driver runs on: trio's virtual clock when every model is simulated and timed by a latency model."""
    run, loop = shared_run(holder)
    try:
        return loop.play(run, job)
    finally:
        if loop.closed:
            _SHARED.clear()  # its loop was stopped: the next episode opens another


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


async def _play(run: ModeRun, job: EpisodeJob, clients: dict[str, ModelClient]) -> Result:
    logged = _resumed(job)
    if logged is not None and logged.result is not None:  # died after finishing, before handing the result back
        return logged_episode(job.task.id, logged.result)
    log = RunLog(Path(job.part)) if job.part else None
    try:
        return await run.play((job.task, job.trial), clients, log=log, resumed=logged)
    finally:
        if log is not None:
            log.close()


@asynccontextmanager
async def _roles(spec: RunSpec, solo: bool) -> AsyncIterator[dict[str, ModelClient]]:
    """The role clients on this worker (:func:`~agentspec.roles.open_roles`): model endpoints (checked by
    the driver: none is served embedded), or the cassette being replayed (read only when a role needs it)."""
    from agentspec.roles import open_roles, plan_roles, run_roles

    if not plan_roles(spec, run_roles(spec, solo)):
        yield {}
        return
    async with open_roles(spec, solo=solo) as roles:
        yield roles.clients
