"""A stdio MCP server dies with agentspec (issue 37, item 5): a SIGTERM (``timeout``, a job scheduler) or a SIGINT to
``agentspec run --bench mcp`` in the middle of a call leaves no server process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "tests" / "servers" / "files_server.py"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_a_run_leaves_no_server_behind(signum: int, tmp_path: Path):
    pids, root = tmp_path / "pids", tmp_path / "root"
    root.mkdir()
    tasks = tmp_path / "tasks.jsonl"
    gold = [{"name": "sleep", "arguments": {"seconds": 120}}, {"name": "done", "arguments": {"answer": "slept"}}]
    tasks.write_text(json.dumps({"id": "nap", "task": "Take a nap.", "gold": gold}) + "\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "agentspec.cli", "run", "--bench", "mcp",
         "--mcp", f"python {FILES} {root} --pids {pids}", "--tasks", str(tasks), "--agent", "oracle", "--no-progress"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The bench lists the tools with a server of its own (stopped at once), then the episode starts its server
        # and calls `sleep`: the second server is the one in the middle of a call.
        assert _wait(lambda: pids.is_file() and len(pids.read_text().split()) >= 2, 60), "the servers did not start"
        time.sleep(1.5)
        assert run.poll() is None
        servers = [int(pid) for pid in pids.read_text().split()]
        assert _alive(servers[-1])
        run.send_signal(signum)
        run.wait(timeout=30)
        assert _wait(lambda: not any(_alive(pid) for pid in servers), 5), \
            f"server processes still running after {signal.Signals(signum).name}: {[p for p in servers if _alive(p)]}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in [int(p) for p in pids.read_text().split()] if pids.is_file() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
