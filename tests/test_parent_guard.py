"""A jail lives as long as agentspec's process, not as long as the thread that started it (trio starts every
subprocess from a worker thread, which ends when idle), and it ends when that process dies, even by SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agentspec.sandbox.parent_guard import guarded

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")


def jail(seconds: int) -> list[str]:
    assert BWRAP is not None
    # The AppWorld jail's flags: run as root, this bubblewrap arms the parent-death signal on itself.
    return [BWRAP, "--unshare-all", "--new-session", "--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc", "sleep", str(seconds)]


def started_from_a_thread_that_ends(argv: list[str]) -> subprocess.Popen[bytes]:
    started: list[subprocess.Popen[bytes]] = []
    def start() -> None:
        started.append(subprocess.Popen(argv))
        time.sleep(1.0)  # as trio's cached worker thread lingers: bubblewrap has armed its signal when it ends

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    return started[0]


def alive_after(process: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


@needs_bwrap
def test_a_guarded_jail_outlives_the_thread_that_started_it():
    bare = started_from_a_thread_that_ends(jail(30))
    kept = started_from_a_thread_that_ends(guarded(jail(30)))
    try:
        if os.geteuid() == 0:  # the bug the guard is for (measured as root): the thread's end killed the jail
            assert not alive_after(bare, 5.0)
        assert alive_after(kept, 2.0)
    finally:
        for process in (bare, kept):
            process.kill()
            process.wait()


@needs_bwrap
def test_a_guarded_jail_passes_its_exit_status_on():
    assert subprocess.run(guarded([*jail(0)[:-2], "sh", "-c", "exit 7"]), check=False).returncode == 7
    assert subprocess.run(guarded([*jail(0)[:-2], "true"]), check=False).returncode == 0


def test_the_guarded_command_dies_with_agentspecs_process(tmp_path):
    pid_file = tmp_path / "pid"
    middle = textwrap.dedent(f"""
        import subprocess, sys, time
        from agentspec.sandbox.parent_guard import guarded
        child = subprocess.Popen(guarded(["/bin/sh", "-c", "echo $$ > {pid_file}; exec sleep 60"]))
        time.sleep(60)
    """)
    process = subprocess.Popen([sys.executable, "-c", middle])
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, "the guarded command did not start"
            time.sleep(0.05)
        sleeper = int(pid_file.read_text())
        os.kill(process.pid, signal.SIGKILL)  # agentspec's process dies without cleaning up
        process.wait()
        deadline = time.monotonic() + 10
        while _running(sleeper):
            assert time.monotonic() < deadline, "the guarded command outlived the process that started it"
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while we read
        return False
