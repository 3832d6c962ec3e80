"""Exactly once across a crash, for each kind of environment (:data:`agentspec.snapshot.ResumeBy`).

* ``checkpoint`` (in-process state, the run log holds it): tests/test_runlog.py;
* ``replay`` (a fresh scratch tree, container or world per episode): the committed steps run again on the fresh one
  before the loop goes on, each checked against its logged answer; a resumed workspace-demo episode keeps the files
  its first life wrote (it lost them before: reward 0 instead of 1);
* ``world`` (state outside agentspec that outlives it: an MCP server, a database file): committed effects are there
  already; a call the stopped run started and never confirmed stops the resume with one line naming it, unless the
  user says to run it again (``retry``) or to record it as not done (``skip``).  Read-only and idempotent calls run
  again without asking.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentspec.cli import main
from agentspec.errors import ConfigError
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.policies.scripted import OracleAuthority
from agentspec.runtime.runlog.writer import RunLog
from agentspec.sandbox.sqlite_backend import SqliteBackend
from agentspec.snapshot import InProcessBackend, resume_by
from agentspec.types import ToolCall

INSERT = ToolCall(name="sql_execute", arguments={"sql": "INSERT INTO items (name) VALUES ('kettle')"})
COUNT = ToolCall(name="sql_query", arguments={"sql": "SELECT count(*) FROM items"})
SCRIPT = [INSERT, COUNT]


def _database(folder: Path) -> Path:
    path = folder / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (name TEXT)")
    return path


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])


def _crashed_after_the_write(tmp_path: Path) -> tuple[Path, Path]:
    """A run that logged its INSERT's intent, wrote the row into the database (the world) and died before the
    commit record: the log holds the intent alone, the database the row."""
    database, log_path = _database(tmp_path), tmp_path / "run.log.jsonl"
    log = RunLog(log_path)
    log.intents("shop", 0, [INSERT], "authority")
    log.close()
    with sqlite3.connect(database) as conn:
        conn.execute("INSERT INTO items (name) VALUES ('kettle')")
    return database, log_path


async def _resume(database: Path, log_path: Path, uncertain: str) -> Any:
    async with SqliteBackend(database) as backend:
        log = RunLog(log_path)
        try:
            loop = ExecutionLoop(backend, OracleAuthority(list(SCRIPT)), log=log, task_id="shop",
                                 config=ExecutorConfig(mode="sequential", resume_uncertain=uncertain))
            loop.resume(RunLog.read(log_path)["shop"])
            return await loop.run()
        finally:
            log.close()


def test_the_kinds_of_the_backends() -> None:
    from agentspec.sandbox.docker_backend import DockerBackend
    from agentspec.sandbox.overlay import OverlayBackend
    from envs.appworld.backend import AppWorldTools

    assert resume_by(InProcessBackend.__new__(InProcessBackend)) == "checkpoint"
    assert resume_by(SqliteBackend(Path("x.db"))) == "world"
    assert {OverlayBackend.resume_by, DockerBackend.resume_by, AppWorldTools.resume_by} == {"replay"}


def test_an_unconfirmed_write_to_the_world_stops_the_resume_with_its_call(tmp_path: Path) -> None:
    database, log_path = _crashed_after_the_write(tmp_path)
    with pytest.raises(ConfigError) as raised:
        anyio.run(_resume, database, log_path, "stop")
    message = str(raised.value)
    assert "sql_execute" in message and "INSERT INTO items" in message and "--resume-retry-uncertain" in message
    assert "\n" not in message and _rows(database) == 1  # nothing ran


def test_retry_runs_it_again_and_skip_records_it_as_not_done(tmp_path: Path) -> None:
    (tmp_path / "retry").mkdir()
    database, log_path = _crashed_after_the_write(tmp_path / "retry")
    result = anyio.run(_resume, database, log_path, "retry")
    assert _rows(database) == 2 and [s.call for s in result.steps] == SCRIPT  # the user chose to run it again

    (tmp_path / "skip").mkdir()
    database, log_path = _crashed_after_the_write(tmp_path / "skip")
    result = anyio.run(_resume, database, log_path, "skip")
    assert _rows(database) == 1
    skipped = result.steps[0]
    assert skipped.call == INSERT and skipped.observation.error and "not done" in skipped.observation.content
    assert result.steps[1].call == COUNT
    assert RunLog.read(log_path)["shop"].uncertain == []  # the skip is logged: a second resume does not ask again


def test_an_unconfirmed_read_runs_again_without_asking(tmp_path: Path) -> None:
    database, log_path = _database(tmp_path), tmp_path / "run.log.jsonl"
    log = RunLog(log_path)
    log.intents("shop", 0, [COUNT], "authority")
    log.close()

    async def resume() -> Any:
        async with SqliteBackend(database) as backend:
            loop = ExecutionLoop(backend, OracleAuthority([COUNT]), task_id="shop")
            loop.resume(RunLog.read(log_path)["shop"])
            return await loop.run()

    assert [s.call for s in anyio.run(resume).steps] == [COUNT]


def test_resume_flags_need_resume(tau2_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--data-dir", str(tau2_dir), "--limit", "1",
                 "--resume-skip-uncertain", "--no-progress"])
    assert code == 2 and "--resume-skip-uncertain says how to resume: pass --resume too" in capsys.readouterr().err


# --- replay: a fresh environment per episode ------------------------------------------------------------


def _bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: the workspace bench's tools run only in its jail "
                    "(apt-get install bubblewrap; .ci/run installs it)")


def test_a_resumed_workspace_episode_keeps_what_its_first_life_wrote(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """workspace-demo, ``ws-rename-config``, the log cut after each of its commits in turn (as a kill -9 leaves it):
    every resume ends with the uninterrupted run's reward and calls, each committed step applied once."""
    _bwrap()
    common = ["run", "--bench", "workspace-demo", "--agent", "oracle", "--task-ids", "ws-rename-config",
              "--mode", "sequential", "--no-progress"]
    full = tmp_path / "full"
    assert main([*common, "--out", str(full)]) == 0
    capsys.readouterr()
    whole = json.loads((full / "results.json").read_text())["episodes"]["sequential"][0]
    assert whole["reward"] == 1.0
    lines = (full / "run-sequential.log.jsonl").read_text().splitlines(keepends=True)
    commits = [i for i, line in enumerate(lines) if '"type":"commit"' in line]
    assert len(commits) >= 4
    for cut in (commits[3] + 1, commits[-1] + 1, commits[3]):  # after 4 commits; after all; an intent alone
        folder = tmp_path / f"cut{cut}"
        folder.mkdir()
        (folder / "run-sequential.log.jsonl").write_text("".join(lines[:cut]))
        assert main([*common, "--out", str(folder), "--resume"]) == 0, capsys.readouterr().err
        resumed = json.loads((folder / "results.json").read_text())["episodes"]["sequential"][0]
        assert resumed["reward"] == 1.0, cut
        assert [m.get("tool_calls") for m in resumed["messages"]] == [m.get("tool_calls") for m in whole["messages"]]


def test_a_log_torn_inside_its_header_resumes_as_a_fresh_run(tau2_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A kill -9 while the header was being written leaves half a line: nothing to resume, so the run starts
    afresh (it was refused as "not written by agentspec run")."""
    common = ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--split", "small", "--limit", "1", "--mode",
              "sequential", "--data-dir", str(tau2_dir), "--no-progress", "--out", str(tmp_path)]
    assert main(common) == 0
    log = tmp_path / "run-sequential.log.jsonl"
    log.write_text(log.read_text().splitlines()[0][:40])
    capsys.readouterr()
    assert main([*common, "--resume"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "results.json").read_text())["episodes"]["sequential"][0]["reward"] == 1.0


def test_a_resumed_episode_keeps_its_whole_time_and_says_it_was_resumed(tau2_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A task resumed mid-episode counts the time before its last commit too (it counted only the time after it:
    22.92 s instead of 36.7 once), and the episode and the mode's summary say it was resumed."""
    task = "[service_issue]airplane_mode_on|overdue_bill_suspension[PERSONA:None]"
    common = ["run", "--json", "--bench", "tau2-telecom", "--solo", "--agent", "oracle", "--mode", "sa", "--speculator-model",
              "noisy-oracle:0.8", "--latency-model", "smc-paper", "--data-dir", str(tau2_dir), "--no-progress",
              "--task-ids", task]
    full = tmp_path / "full"
    assert main([*common, "--out", str(full)]) == 0
    whole = json.loads((full / "results.json").read_text())["episodes"]["sa"][0]
    lines = (full / "run-sa.log.jsonl").read_text().splitlines(keepends=True)
    commits = [i for i, line in enumerate(lines) if '"type":"commit"' in line]
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "run-sa.log.jsonl").write_text("".join(lines[:commits[len(commits) // 2] + 1]))
    capsys.readouterr()
    assert main([*common, "--out", str(cut), "--resume"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    resumed = json.loads((cut / "results.json").read_text())["episodes"]["sa"][0]
    assert resumed["execution"]["resumed"]["from_step"] == len(commits) // 2 + 1
    assert summary["modes"]["sa"]["resumed_episodes"] == 1
    assert resumed["execution"]["metrics"]["wall_s"] == pytest.approx(whole["execution"]["metrics"]["wall_s"], rel=0.1)
