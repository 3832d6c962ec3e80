"""The batch layer: one mode's episodes as one batch, with its run log, its resume, its clock and its cassette.

    run = ModeRun.of(spec, mode, bench, macros)                  # inside the run's event loop
    episodes = await run_mode(run, jobs, LocalStrategy(clients))  # job order kept

:func:`run_mode` is the one per-mode loop: a job the run log already holds finished comes back as a
:class:`~agentspec.bench.episode.LoggedEpisode` (:func:`logged_episode`); every other is played by the
:class:`Strategy`.  :class:`LocalStrategy` plays them in this process into the mode's one run log;
:class:`agentspec.cluster.RayStrategy` (which imports this module) makes each a Ray task that logs to its own part.
Either way one episode is :meth:`ModeRun.play`: its parts built, played and scored
(:func:`agentspec.assembly.run_episode`), its result logged.

* the run log: :func:`log_path`, :func:`log_config` (the settings a resume must match, with the files they name
  taken by content: the macro library, the cassette a replay answers from) and :func:`prior_log` (resume);
* the clock a mode plays on: :attr:`ModeRun.virtual_clock`, the one its run is on
  (:func:`agentspec.virtual_clock.on_clock`), which a Ray worker plays on too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from agentspec.assembly import assemble, is_solo, learn_from, macros_path, run_episode
from agentspec.bench.episode import Episode, LoggedEpisode
from agentspec.bench.protocol import Bench
from agentspec.bench.runner import run_jobs
from agentspec.data import sha256_file
from agentspec.errors import ConfigError
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.models.cassette import FILE as CASSETTE_FILE
from agentspec.results import results_file
from agentspec.roles import PolicyMaker
from agentspec.run_spec import RunSpec, learned_speculator
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.real_time import virtual_clock
from agentspec.runtime.runlog.records import data_digest
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.types import ToolCall

Job = tuple[Any, int]
"""A task and its trial number."""
Result = Episode | LoggedEpisode
Play = Callable[[Job, TaskLog | None], Awaitable[Result]]
"""Plays one job, given what the run log holds of it unfinished (None: nothing)."""


def job_key(job: Job) -> str:
    """A job's key in the run log: ``"<task id>#<trial>"``."""
    task, trial = job
    return f"{task.id}#{trial}"


def logged_episode(task_id: str, stored: dict[str, Any]) -> LoggedEpisode:
    """The episode an earlier run finished, from its logged record (what ``results.json`` keeps of it)."""
    return LoggedEpisode(task_id, stored["reward"], stored.get("error"), stored)


# --- the run log -------------------------------------------------------------------------------


def log_path(spec: RunSpec, mode: Mode) -> Path | None:
    """``mode``'s run log: ``<out>/run-<mode>.log.jsonl`` (None without ``out``)."""
    return Path(spec.out) / f"run-{mode.name}.log.jsonl" if spec.out else None


def log_config(spec: RunSpec, mode: Mode) -> dict[str, Any]:
    """What ``mode``'s run log records as its configuration (:meth:`RunSpec.result_settings`), with the files the
    settings name taken by content: the macro library smc runs, the cassette a replay answers from."""
    settings = spec.result_settings(mode)
    if "macros" in settings:
        path = macros_path(spec)
        settings["macros"] = sha256_file(Path(path)) if path and Path(path).is_file() else path
    if spec.replay:
        recording = Path(spec.replay) / CASSETTE_FILE
        settings["replay"] = sha256_file(recording) if recording.is_file() else None
    learned = {path: sha256_file(Path(path)) if Path(path).is_file() else None
               for model in (settings.get("speculator_model"), *settings.get("more_speculators", []))
               if (path := learned_speculator(model))}
    if learned:  # a learned speculator's file, by content: a changed file would blend two speculators' guesses
        settings["learned_speculators"] = learned
    if spec.runs:  # a recorded agent's run, by content (a run folder holds it as its results file)
        try:
            settings["runs"] = sha256_file(results_file(spec.runs))
        except ConfigError:
            settings["runs"] = None
    return settings


def prior_log(spec: RunSpec, mode: Mode, jobs: Sequence[Job]) -> dict[str, TaskLog]:
    """What ``mode``'s run log holds for this run: with ``resume``, its tasks, once the log is checked (signed
    records, this run's settings, each finished task's data unchanged); else nothing, and an earlier run's log is
    refused unless ``overwrite`` discards it."""
    path = log_path(spec, mode)
    if path is None or not path.is_file():
        return {}
    if not spec.resume:
        if spec.overwrite or path.stat().st_size == 0:
            return {}
        raise ConfigError(f"{path} holds an earlier run's log: pass --resume to continue it, or --overwrite to "
                          "discard it and start afresh")
    logged = RunLog.read(path, log_config(spec, mode))
    changed = sorted({task.id for task, trial in jobs
                      if (done := logged.get(f"{task.id}#{trial}")) is not None and done.data is not None
                      and done.data != data_digest(task)})
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise ConfigError(f"{path}: the data of task {changed[0]!r}{more} changed since its result was logged; "
                          "refusing to resume (pass --overwrite to start afresh)")
    return logged


# --- one mode's batch ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeRun:
    """What every episode of one mode shares: the spec, the mode, the bench, the macros, the bench's distractors
    (read once), whether play is solo, and the clock.  A Ray run puts it in the object store once per mode."""

    spec: RunSpec
    mode: Mode
    bench: Bench[Any]
    macros: MacroLibrary | None = None
    solo: bool = True
    distractors: list[ToolCall] = field(default_factory=list)
    virtual_clock: bool = False
    """Whether the mode runs on trio's virtual clock: a Ray worker plays on it too, so its times match a local run's."""

    @classmethod
    def of(cls, spec: RunSpec, mode: Mode, bench: Bench[Any], macros: MacroLibrary | None = None) -> ModeRun:
        """``mode``'s batch on the clock it is called on (call it inside the run's event loop)."""
        # Every task's gold calls, once: what a noisy oracle or a simulated prober draws its wrong guesses from.
        distractors = list(bench.distractors()) if spec.agent in ("oracle", "replay") else []
        return cls(spec, mode, bench, macros, is_solo(spec, bench), distractors, virtual_clock() is not None)

    @property
    def log_path(self) -> Path | None:
        return log_path(self.spec, self.mode)

    def log_config(self) -> dict[str, Any]:
        return log_config(self.spec, self.mode)

    async def play(self, job: Job, clients: Mapping[str, ModelClient], *, log: RunLog | None = None,
                   resumed: TaskLog | None = None, governor: Governor | None = None,
                   learner: OnlineLearner | None = None, policies: Mapping[str, Policy | PolicyMaker] | None = None) -> Episode:
        """One job played, scored and, with ``log``, its result logged (continuing ``resumed``, what the log holds
        of it unfinished); ``governor``/``learner``: the mode's, when it has them; ``policies``: roles given as
        policies of your own."""
        task, _ = job
        parts = assemble(self.spec, self.mode, self.bench, task, clients, solo=self.solo, distractors=self.distractors,
                         trial=job[1], policies=policies, governor=governor, learner=learner)
        episode = await run_episode(self.spec, self.mode, self.bench, task, parts, trial=job[1], macros=self.macros,
                                    log=log, resumed=resumed)
        if learner is not None:
            learn_from(learner, self.bench, task, episode)
        if log is not None:
            log.finish(job_key(job), episode.record(), data_digest(task))
        return episode


class Strategy(Protocol):
    """Where a batch's episodes are played: in this process (:class:`LocalStrategy`) or as Ray tasks
    (:class:`agentspec.cluster.RayStrategy`)."""

    def in_flight(self, run: ModeRun, jobs: Sequence[Job]) -> int:
        """How many episodes :func:`run_mode` plays at once."""
        ...

    def prior(self, run: ModeRun, jobs: Sequence[Job]) -> dict[str, TaskLog]:
        """Make the mode's run log ready (checked to resume, else started afresh); what it holds of ``jobs``."""
        ...

    def playing(self, run: ModeRun, todo: Sequence[tuple[Job, TaskLog | None]]) -> AbstractAsyncContextManager[Play]:
        """The block in which ``todo`` (the jobs not finished yet, each with what the log holds of it) is played."""
        ...


@dataclass
class LocalStrategy:
    """Every episode in this process (``spec.concurrency`` at once), logged to the mode's one run log."""

    clients: Mapping[str, ModelClient]
    governor: Governor | None = None
    learner: OnlineLearner | None = None
    policies: Mapping[str, Policy | PolicyMaker] = field(default_factory=dict)
    """Roles given as policies of your own (the Python API's)."""
    previous: dict[str, TaskLog] | None = None
    """The mode's run log as the run checked it before its first task (None: read it here)."""

    def in_flight(self, run: ModeRun, jobs: Sequence[Job]) -> int:
        return run.spec.concurrency

    def prior(self, run: ModeRun, jobs: Sequence[Job]) -> dict[str, TaskLog]:
        previous = self.previous if self.previous is not None else prior_log(run.spec, run.mode, jobs)
        if run.log_path is not None and not run.spec.resume:
            run.log_path.unlink(missing_ok=True)  # an earlier run's log, which prior_log let through: overwrite, or empty
        return previous

    @asynccontextmanager
    async def playing(self, run: ModeRun, todo: Sequence[tuple[Job, TaskLog | None]]) -> AsyncIterator[Play]:
        path = run.log_path
        log = RunLog(path, run.log_config()) if path is not None else None

        async def play(job: Job, resumed: TaskLog | None) -> Result:
            return await run.play(job, self.clients, log=log, resumed=resumed, governor=self.governor,
                                  learner=self.learner, policies=self.policies)

        try:
            yield play
        finally:
            if log is not None:
                log.close()


async def run_mode(run: ModeRun, jobs: Sequence[Job], strategy: Strategy) -> list[Result]:
    """Every job of ``run``'s mode, in job order: each the run log holds finished read back from it, every other
    played by ``strategy``.  With ``spec.out``, logged to ``run-<mode>.log.jsonl`` (``resume`` continues it,
    ``overwrite`` replaces it; see :func:`prior_log`)."""
    previous = strategy.prior(run, jobs)
    todo = [(job, previous.get(job_key(job))) for job in jobs]
    todo = [(job, logged) for job, logged in todo if logged is None or logged.result is None]
    async with strategy.playing(run, todo) as play:

        async def one(job: Job) -> Result:
            logged = previous.get(job_key(job))
            if logged is not None and logged.result is not None:
                return logged_episode(job[0].id, logged.result)
            return await play(job, logged)

        played = await run_jobs(jobs, one, concurrency=strategy.in_flight(run, jobs), progress=run.spec.progress,
                                label=run.mode.name)
    return cast(list[Result], played)  # run_jobs hands back what ``one`` returned, typed by the protocol it reads
