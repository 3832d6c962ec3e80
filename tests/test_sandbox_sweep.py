"""Workspace trees a killed run left (``agentspec-ws-<pid>-<start>-<id>``) are found and removed, never a live
run's (issue 37 item 13): by ``agentspec sandbox sweep`` wherever runs put them, and by the next backend's start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_support import require_bwrap

from agentspec.sandbox.overlay import PREFIX, scratch_bases, sweep_scratch
from agentspec.sandbox.owner import start_time


def dead_process() -> tuple[int, str]:
    """The pid and start time of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = start_time(child.pid)
    child.wait()
    assert started is not None
    return child.pid, started


def tree(base: Path, pid: int | str, start: str | None, ident: str = "0123abcd") -> Path:
    """A scratch root as a backend names it, with a few files in it."""
    root = base / f"{PREFIX}{pid}-{start}-{ident}"
    (root / "trees" / "1").mkdir(parents=True)
    (root / "trees" / "1" / "notes.txt").write_text("x" * 1000)
    return root


def test_sweep_removes_the_trees_of_dead_owners_and_keeps_live_ones(tmp_path: Path) -> None:
    pid, started = dead_process()
    me = os.getpid()
    dead = tree(tmp_path, pid, started)
    recycled = tree(tmp_path, me, str(int(start_time(me) or 0) + 1), "recycle1")  # my pid, another start: gone
    live = tree(tmp_path, me, start_time(me))
    assert sorted(sweep_scratch(tmp_path)) == sorted([dead, recycled])
    assert not dead.exists() and not recycled.exists()
    assert (live / "trees" / "1" / "notes.txt").read_text() == "x" * 1000


def test_without_a_start_time_only_a_pid_no_process_has_is_gone(tmp_path: Path) -> None:
    """A root made where /proc was unreadable is named ``<pid>-None-<id>``: it was swept even while its run lived."""
    pid, _ = dead_process()
    dead = tree(tmp_path, pid, None)
    live = tree(tmp_path, os.getpid(), None)
    assert sweep_scratch(tmp_path) == [dead]
    assert live.is_dir()


def test_sweep_leaves_what_is_not_a_tree_of_this_user(tmp_path: Path) -> None:
    pid, started = dead_process()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (tmp_path / f"{PREFIX}{pid}-{started}-link0001").symlink_to(target)
    (tmp_path / f"{PREFIX}{pid}-{started}-file0001").write_text("a file")
    (tmp_path / f"{PREFIX}notours").mkdir()
    if os.geteuid() == 0:
        foreign = tree(tmp_path, pid, started, "foreign1")
        os.chown(foreign, 65534, 65534)
    assert sweep_scratch(tmp_path) == []
    assert (target / "keep.txt").read_text() == "keep" and (tmp_path / f"{PREFIX}notours").is_dir()
    if os.geteuid() == 0:
        assert foreign.is_dir()


def test_the_sweep_command_looks_wherever_runs_put_their_trees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """$AGENTSPEC_SCRATCH, /dev/shm and the temp dir: a run's default depends on its environment (a run without a
    writable /dev/shm, or with AGENTSPEC_SCRATCH set, puts them elsewhere than the sweep's default)."""
    from agentspec.cli import main

    (tmp_path / "scratch").mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("AGENTSPEC_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert scratch_bases()[0] == tmp_path / "scratch" and tmp_path / "tmp" in scratch_bases()
    pid, started = dead_process()
    dead = [tree(tmp_path / "scratch", pid, started, "scratch1"), tree(tmp_path / "tmp", pid, started, "tmpdir01")]
    live = tree(tmp_path / "tmp", os.getpid(), start_time(os.getpid()))
    assert main(["sandbox", "sweep"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["scratch"] >= 2
    assert not any(path.exists() for path in dead) and live.is_dir()


HOLD = """
import sys, anyio
from pathlib import Path
from agentspec.sandbox.overlay import OverlayBackend
from agentspec.sandbox.program import Limits
from envs.workspace.environment import workspace_program

async def main():
    backend = OverlayBackend(workspace_program(), None, mode="copy", limits=Limits(disk_bytes=None))
    await backend.start()
    (backend.workdir / "made.txt").write_text("by a run about to be killed")
    print(backend._root, flush=True)
    await anyio.sleep(600)

anyio.run(main)
"""


def test_a_killed_runs_trees_are_removed_by_the_sweep_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from agentspec.cli import main

    require_bwrap()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "AGENTSPEC_SCRATCH": str(scratch)}
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env, cwd=repo)
    try:
        assert child.stdout is not None
        root = Path(child.stdout.readline().strip())
        assert root.parent == scratch and (root / "live" / "made.txt").is_file()
        assert sweep_scratch(scratch) == []  # its run is alive
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert root.is_dir()  # a killed run cleans nothing up ...
    monkeypatch.setenv("AGENTSPEC_SCRATCH", str(scratch))
    assert main(["sandbox", "sweep"]) == 0  # ... the sweep does
    assert not root.exists()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["scratch"] >= 1


# --- run folders: a task's files in the temp dir (a workspace's source, a world's root) --------------------------------


MAKE_RUN_FOLDER = """
import time
from agentspec.sandbox.overlay import run_folder
folder = run_folder("ws-fix-add")
(folder / "calc.py").write_text("def add(a, b): return a - b")
print(folder, flush=True)
time.sleep(600)
"""


def test_a_killed_runs_folder_in_the_temp_dir_is_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """What the review saw: ``kill -9`` of a run left its task folders in the temp dir, named after the task only,
    so nothing could tell whose they were.  Now they carry their run's pid and start time."""
    from agentspec.cli import main

    temp = tmp_path / "tmp"
    temp.mkdir()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TMPDIR": str(temp)}
    children, folders = [], []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", MAKE_RUN_FOLDER], stdout=subprocess.PIPE, text=True, env=env,
                                 cwd=repo)  # fmt: skip
        assert child.stdout is not None
        folders.append(Path(child.stdout.readline().strip()))
        children.append(child)
    try:
        killed, alive = folders
        assert killed.parent == temp and killed.name.startswith(f"agentspec-run-{children[0].pid}-")
        assert "-ws-fix-add-" in killed.name and (killed / "calc.py").is_file()
        children[0].send_signal(signal.SIGKILL)
        children[0].wait()
        assert killed.is_dir()  # a killed run cleans nothing up ...
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        assert main(["sandbox", "sweep"]) == 0  # ... the sweep does, and leaves the live run's folder
        assert not killed.exists() and (alive / "calc.py").is_file()
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["scratch"] >= 1
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stdout is not None:
                child.stdout.close()


def test_the_next_run_folder_sweeps_what_dead_runs_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentspec.sandbox.overlay import RUN_PREFIX, run_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid, started = dead_process()
    left = tmp_path / f"{RUN_PREFIX}{pid}-{started}-gaia-t1-abcd1234"
    left.mkdir()
    (left / "report.pdf").write_bytes(b"%PDF")
    old_style = tmp_path / "agentspec-ws-fix-add-46i_bvs2"  # named before owners were recorded: never guessed at
    old_style.mkdir()
    folder = run_folder("gaia:t2,a/b")
    assert not left.exists() and old_style.is_dir()
    assert folder.parent == tmp_path and folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert folder.name.startswith(f"{RUN_PREFIX}{os.getpid()}-{start_time(os.getpid())}-gaia_t2_a_b-")
