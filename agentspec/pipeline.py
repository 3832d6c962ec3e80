"""A whole run: the spec's tasks, every mode in turn over the same jobs, on the clock the spec needs.

    spec = RunSpec.of(bench="tau2-telecom", split="small", agent="oracle", modes="sequential,sa",
                      speculator_model="noisy-oracle:0.8", latency_model="smc-paper")
    outcome = run(spec)                       # every mode over the same tasks, side by side
    outcome.modes["sa"].episodes[0].reward

:func:`run` holds the ``--out`` folder for the whole run; :func:`prepare` settles what is decided once (the bench,
its tasks, the learned speculator's fit, the macros, where hints go) and checks every mode's run log before the
first task starts; then :func:`run_modes` opens the role clients once and runs each mode as one batch (:func:`agentspec.batch.run_mode`)
with the strategy the spec names: this process, or a Ray cluster (:class:`agentspec.cluster.RayStrategy`,
imported only when a run names a cluster).  The layers below: :mod:`agentspec.batch` (one mode's batch) and
:mod:`agentspec.assembly` (one episode).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from agentspec.assembly import (
    ModeResult,
    Outcome,
    bench_data,
    check_held_out,
    is_solo,
    load_macros,
    mode_governor,
    online_learner,
    replay_jobs,
    resolve_learned,
    resolve_replay,
    select_tasks,
)
from agentspec.batch import Job, LocalStrategy, ModeRun, Strategy, prior_log, run_mode
from agentspec.bench.protocol import Bench, has_user
from agentspec.bench.registry import open_bench
from agentspec.data import unverified_data
from agentspec.errors import ConfigError
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.roles import open_roles, settle_hints
from agentspec.run_spec import RunSpec
from agentspec.runtime.governor.rule import Governor
from agentspec.runtime.runlog.lock import locked_out
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.virtual_clock import on_clock


@dataclass(frozen=True)
class Prepared:
    """A run with everything decided once settled (:func:`prepare`): what every mode and every episode then reads
    and none changes."""

    spec: RunSpec
    """The spec as the run plays it: a recording's tasks, each plain ``learned`` speculator made ``learned:FILE``,
    ``speculator_hints`` decided."""
    bench: Bench[Any]
    tasks: list[Any]
    jobs: list[Job]
    macros: MacroLibrary | None
    macros_path: str | None
    logs: dict[str, dict[str, TaskLog]] = field(default_factory=dict)
    """Each mode's run log as checked before the first task (what ``--resume`` continues)."""


def prepare(spec: RunSpec, bench: Bench[Any] | None = None) -> Prepared:
    """Everything a run decides once, before its first task: the bench (the one registered as ``spec.bench`` unless
    given), its tasks and jobs (task x trial, or a recording's episodes), the learned speculator's fit, the held-out
    check, the macro library, where speculator hints go, and every mode's run log, checked."""
    if bench is None:
        if spec.bench is None:
            raise ConfigError("a run needs a bench (--bench)")
        with unverified_data(spec.unverified_data):
            bench = open_bench(spec.bench, spec.data_dir, backend=spec.backend, max_steps=spec.max_steps,
                               max_errors=spec.max_errors, options=spec.bench_options)
    if not spec.solo and not has_user(bench) and spec.agent == "llm" and spec.user_model:
        raise ConfigError(f"{bench.name} has no user simulator: drop --user-model")
    spec = resolve_replay(spec, bench)
    if spec.agent == "replay":  # the recorded episodes, each its task's trial
        tasks, jobs = replay_jobs(spec, bench)
    else:
        tasks = select_tasks(spec, bench)
        jobs = [(task, trial) for trial in range(spec.trials) for task in tasks]
    spec = settle_hints(resolve_learned(spec, bench), solo=is_solo(spec, bench))
    check_held_out(spec, bench, tasks)
    path, macros = load_macros(spec)
    logs = {mode.name: prior_log(spec, mode, jobs) for mode in spec.modes}  # every log checked before any task
    return Prepared(spec, bench, tasks, jobs, macros, path, logs)


def strategy(spec: RunSpec, clients: dict[str, ModelClient], governor: Governor | None = None,
             learner: OnlineLearner | None = None, previous: dict[str, TaskLog] | None = None) -> Strategy:
    """Where a mode's episodes run: on the Ray cluster ``spec.cluster`` names (the ray extra: imported only
    then), else in this process with the mode's ``governor`` and ``learner`` (``previous``: its run log as
    :func:`prepare` checked it)."""
    if spec.cluster is None:
        return LocalStrategy(clients, governor, learner, previous=previous)
    from agentspec.cluster import RayStrategy

    return RayStrategy()


async def run_modes(run: Prepared) -> dict[str, ModeResult]:
    """Open the role clients once, then run each mode of the spec over the same jobs."""
    spec, bench = run.spec, run.bench
    async with open_roles(spec, solo=is_solo(spec, bench)) as roles:
        results: dict[str, ModeResult] = {}
        learner = None
        for mode in spec.modes:
            started = time.perf_counter()
            governor = mode_governor(spec, mode)
            # Each speculating mode learns from the file afresh: a mode never sees what another learned.
            learner = online_learner(spec) if mode.speculates else learner
            batch = ModeRun.of(spec, mode, bench, run.macros)
            played = strategy(spec, roles.clients, governor, learner if mode.speculates else None, run.logs[mode.name])
            episodes = await run_mode(batch, run.jobs, played)
            results[mode.name] = ModeResult(episodes, time.perf_counter() - started,
                                            governor.report() if governor is not None else None)
        if learner is not None and spec.save_speculator:
            learner.artifact().save(spec.save_speculator)
        return results


def run(spec: RunSpec, bench: Bench[Any] | None = None) -> Outcome:
    """Run the spec: every mode over the same tasks and trials, on trio's virtual clock when every model is
    simulated, a latency model times them and the bench runs in process, else on the wall clock.

    ``bench``: your own :class:`~agentspec.bench.protocol.Bench` object; by default the one registered as
    ``spec.bench``."""
    with locked_out(spec.out) if spec.out else nullcontext():  # one run at a time writes into an --out folder
        prepared = prepare(spec, bench)
        started = time.perf_counter()
        modes = on_clock(run_modes, prepared, virtual=prepared.spec.virtual_clock)
    spec = prepared.spec
    return Outcome(spec, prepared.bench, prepared.tasks, modes, prepared.macros, prepared.macros_path,
                   time.perf_counter() - started, spec.virtual_clock, bench_data(spec))
