"""The batch layer: one per-mode loop (resume, run log, clock) whatever plays the episodes, and one reading of a
logged task for a resumed executor and the API's logged result.

Real tau2-telecom tasks with the oracle agent and a noisy-oracle speculator on the virtual clock; the worker side
is played as a Ray worker plays it (:func:`agentspec.cluster.worker.play_episode`), without a cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_import_graph import _module_of, import_graph
from test_ray_cluster import _comparable, _messages, _same

from agentspec import Executor
from agentspec.batch import Job, LocalStrategy, ModeRun, Play, Result, run_mode
from agentspec.bench.episode import Episode, LoggedEpisode
from agentspec.cluster.worker import EpisodeJob, play_episode
from agentspec.pipeline import run
from agentspec.run_spec import RunSpec
from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog
from agentspec.virtual_clock import on_clock

BASE: dict[str, Any] = {"bench": "tau2-telecom", "split": "small", "limit": 3, "agent": "oracle", "modes": "sa",
                        "speculator_model": "noisy-oracle:0.8", "latency_model": "smc-paper", "progress": False}


class RecordingStrategy(LocalStrategy):
    """The local strategy, noting each job it was asked to play and what the log held of it."""

    def __init__(self) -> None:
        super().__init__({})
        self.played: list[tuple[str, int | None]] = []

    @asynccontextmanager
    async def playing(self, run: ModeRun, todo: Sequence[tuple[Job, TaskLog | None]]) -> AsyncIterator[Play]:
        async with super().playing(run, todo) as play:

            async def noted(job: Job, resumed: TaskLog | None) -> Result:
                self.played.append((job[0].id, len(resumed.steps) if resumed is not None else None))
                return await play(job, resumed)

            yield noted


def _batch(spec: RunSpec, bench: Any, strategy: LocalStrategy) -> list[Result]:
    """``spec``'s one mode over its tasks through :func:`run_mode`, on the virtual clock as a run takes it."""
    tasks = bench.tasks(spec.split, None, spec.limit)

    async def main() -> list[Result]:
        return await run_mode(ModeRun.of(spec, spec.modes[0], bench), [(t, 0) for t in tasks], strategy)

    return on_clock(main, virtual=True)


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_a_resumed_batch_plays_only_the_unfinished_jobs_and_ends_as_a_whole_run(bench, tau2_dir, tmp_path):
    whole = run(RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(tmp_path / "whole")))
    expected = {e.task_id: e.record() for e in whole.modes["sa"].episodes}
    # The run stopped during its second task: its log ends two records after the first task's result.
    log = _log_lines(tmp_path / "whole" / "run-sa.log.jsonl")
    cut = next(i for i, line in enumerate(log) if json.loads(line)["type"] == "task") + 3
    out = tmp_path / "stopped"
    out.mkdir()
    (out / "run-sa.log.jsonl").write_text("".join(log[:cut]))
    held = {key.partition("#")[0]: logged for key, logged in RunLog.read(out / "run-sa.log.jsonl").items()}
    (finished,) = [task for task, logged in held.items() if logged.result is not None]
    (stopped,) = [task for task, logged in held.items() if logged.result is None]
    assert held[stopped].steps, "the cut should leave the stopped task with committed steps"

    strategy = RecordingStrategy()
    episodes = _batch(RunSpec.of(**BASE, data_dir=str(tau2_dir), out=str(out), resume=True), bench, strategy)

    assert [e.task_id for e in episodes] == list(expected)  # job order kept
    for episode in episodes:
        if episode.task_id == finished:  # read back, not played again
            assert isinstance(episode, LoggedEpisode) and episode.record() == expected[finished]
        elif episode.task_id == stopped:  # continued: the same conversation and score (its timings are its own)
            assert isinstance(episode, Episode) and episode.reward == expected[stopped]["reward"]
            assert _messages(episode.record()) == _messages(expected[stopped])
        else:
            assert isinstance(episode, Episode)
            assert _same(_comparable(episode.record()), _comparable(expected[episode.task_id])), episode.task_id
    # Only the unfinished jobs reached the strategy, the stopped one with its logged steps to continue from.
    assert sorted(strategy.played) == sorted((task, len(held[task].steps) if task == stopped else None)
                                             for task in expected if task != finished)
    assert all(logged.result is not None for logged in RunLog.read(out / "run-sa.log.jsonl").values())


def test_a_worker_plays_a_job_as_the_local_batch_does_and_a_retry_reads_its_part(bench, tau2_dir, tmp_path):
    spec = RunSpec.of(**{**BASE, "limit": 1}, data_dir=str(tau2_dir), out=str(tmp_path / "local"))
    (local,) = _batch(spec, bench, LocalStrategy({}))
    task = bench.tasks("small", None, 1)[0]
    batch = ModeRun.of(spec, spec.modes[0], bench)  # outside a loop: the wall clock...
    assert not batch.virtual_clock
    batch = ModeRun(spec, batch.mode, bench, None, batch.solo, batch.distractors, virtual_clock=True)  # ...as a driver on it
    part = tmp_path / "part.jsonl"
    played = play_episode([batch], EpisodeJob(task, 0, str(part)))
    assert isinstance(played, Episode) and _same(_comparable(played.record()), _comparable(local.record()))
    assert RunLog.read(part)[f"{task.id}#0"].result == played.record()
    again = play_episode([batch], EpisodeJob(task, 0, str(part)))  # the worker died after finishing: Ray retries
    assert isinstance(again, LoggedEpisode) and again.record() == played.record()


def test_a_worker_opens_its_loop_and_roles_once_per_mode(bench, tau2_dir, tmp_path):
    from agentspec.cluster.worker import close_loops, shared_run

    spec = RunSpec.of(**{**BASE, "limit": 2}, data_dir=str(tau2_dir))
    first, second = bench.tasks("small", None, 2)
    made = ModeRun.of(spec, spec.modes[0], bench)
    batch = ModeRun(spec, made.mode, bench, None, made.solo, made.distractors, virtual_clock=True)
    _, loop = shared_run([batch])
    played = [play_episode([batch], EpisodeJob(task, 0)) for task in (first, second)]
    assert all(isinstance(e, Episode) and e.error is None for e in played)
    assert shared_run([batch])[1] is loop and not loop.closed  # the same loop and clients for both episodes
    other = ModeRun.of(spec, spec.modes[0], bench)  # the next mode's batch: the previous loop is stopped
    _, last = shared_run([other])
    assert last is not loop and loop.closed
    close_loops()  # what the worker process does at exit (atexit), while the loop's thread can still stop
    assert last.closed
    _, interrupted = shared_run([other])  # an episode interrupted by the driver stops its loop, cancelling it
    interrupted.close(cancel=True)
    assert interrupted.closed
    with pytest.raises(RuntimeError, match="not running"):
        interrupted.portal.call(anyio.sleep, 0)


def test_the_virtual_clock_jumps_and_the_wall_clock_waits():
    async def slept(seconds: float) -> float:
        started = anyio.current_time()
        await anyio.sleep(seconds)
        return anyio.current_time() - started

    wall = time.monotonic()
    assert on_clock(slept, 3600, virtual=True) == pytest.approx(3600)  # an hour of simulated time...
    assert time.monotonic() - wall < 5  # ...in no time
    wall = time.monotonic()
    assert on_clock(slept, 0.2, virtual=False) >= 0.2
    assert time.monotonic() - wall >= 0.2  # the wall clock waits


def test_a_logged_task_reads_back_as_the_steps_the_executor_committed(tmp_path, monkeypatch):
    from test_runlog import _Scripted
    from toy_env import KVEnvironment

    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "api"
    result = Executor(KVEnvironment(), authority=_Scripted(), mode="sequential", out=out).run_sync("count things")
    (logged,) = RunLog.read(out / "run-sequential.log.jsonl").values()
    assert logged.committed() == result.steps  # calls, observations, sources and effect ids, in order
    again = Executor(KVEnvironment(), authority=_Scripted(), mode="sequential", out=out).run_sync("count things")
    assert again.steps == result.steps  # the API's logged result is that same reading


def test_the_cluster_imports_the_batch_layer_and_the_episode_layer_imports_neither():
    edges = import_graph()
    cluster = {e.target for e in edges if _module_of(e.source).startswith("agentspec.cluster")}
    assert "agentspec.batch" in cluster
    assert not cluster & {"agentspec.assembly", "agentspec.pipeline"}, "the cluster reaches past the batch layer"
    below = {e.target for e in edges if _module_of(e.source) == "agentspec.assembly"}
    assert not below & {"agentspec.batch", "agentspec.pipeline", "agentspec.cluster"}
    batch = {e.target for e in edges if _module_of(e.source) == "agentspec.batch"}
    assert not any(t.startswith("agentspec.cluster") for t in batch) and "agentspec.pipeline" not in batch
