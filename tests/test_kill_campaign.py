"""The kill campaign (experiments/kill_campaign.py, issue 37) in the default suite: for each bench, runs killed with
SIGKILL at seeded random moments (some aimed at an intent: mid-tool, mid-macro commit), resumed until they finish,
each compared with an uninterrupted run: every trial identical, no effect applied twice or lost, no record twice in
the run log.  A resume that stops on a call the MCP server outside agentspec never confirmed is *reported*, not a
failure: the campaign checks the store as a user would and resumes with --resume-skip-uncertain or
--resume-retry-uncertain.

Each bench runs the campaign in a process of its own (``--scale quick``: a few tasks; 3 kills).  A bench whose
prerequisite is missing here skips with the campaign's reason (bubblewrap for workspace-demo, the AppWorld venv,
Ray), or fails with it where .ci/run's AGENTSPEC_REQUIRE_* says it must run.  The full campaign's numbers are in
experiments/kill_campaign.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = REPO / "experiments" / "kill_campaign.py"
sys.path.insert(0, str(REPO / "experiments"))

import kill_campaign  # noqa: E402 - from experiments/, put on the path above

KILLS = 3
SEED = 37
REQUIRED_BY = {"workspace": "AGENTSPEC_REQUIRE_ISOLATION", "appworld": "AGENTSPEC_REQUIRE_APPWORLD",
               "ray": "AGENTSPEC_REQUIRE_RAY"}
"""The benches with an optional prerequisite, and the variable that makes its absence a failure (.ci/run sets them)."""


@pytest.mark.parametrize("bench", kill_campaign.BENCHES)
def test_killed_runs_resume_to_the_uninterrupted_results(bench: str, tmp_path: Path) -> None:
    summary = tmp_path / "campaign.json"
    command = [sys.executable, str(CAMPAIGN), "--kills", str(KILLS), "--seed", str(SEED), "--benches", bench,
               "--scale", "quick", "--controls", "0", "--work", str(tmp_path / "work"), "--json", str(summary)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=560)
    if not summary.is_file():
        pytest.fail(f"the campaign exited {done.returncode} without a summary:\n{done.stderr[-3000:]}")
    (row,) = json.loads(summary.read_text())["benches"]
    if "skipped" in row:
        required = REQUIRED_BY.get(bench)
        if required is None or os.environ.get(required) == "1":
            pytest.fail(f"{row['skipped']}" + (f" [{required}=1: this test must run here]" if required else ""),
                        pytrace=False)
        pytest.skip(row["skipped"])
    progress = done.stderr[-4000:]
    assert row["kills"] >= KILLS, progress
    failures = json.dumps(row["failures"], indent=1)[:6000]
    assert row["crashed"] == 0, failures
    assert row["duplicates"] == 0 and row["lost"] == 0, failures
    assert row["log_duplicates"] == 0, failures
    assert row["identical"] == row["trials"], failures
    assert not row["orphans"], f"processes left running after a kill: {row['orphans']}"
    assert done.returncode == 0, progress


# --- the campaign's own checks, on made-up results (no run): they catch what they must ---------------------------


def _snapshot(store: dict[str, int], calls: list[str], answer: str = "appended a") -> kill_campaign.Snapshot:
    said = {"content": answer, **({"error": True} if answer.startswith("Error") else {})}  # as agentspec records it
    messages = [{"role": "assistant", "tool_calls": [{"name": "append_item", "arguments": {"item": "a"}}]},
                {"role": "tool", **said, "requestor": "assistant"}]
    episode = {"reward": 1.0, "termination": "agent_stop", "evaluation": {"reward": 1.0}, "error": None,
               "call_log": None, "messages": messages}
    logged = [("append_item", json.dumps({"item": item})) for item in calls]
    return kill_campaign.Snapshot({("sa", "t1", 0): episode}, {("sa", "t1#0"): logged}, [], 0, Counter(store))


def test_the_checks_catch_a_duplicate_a_loss_and_a_changed_answer() -> None:
    want = _snapshot({"a": 1}, ["a"])
    assert kill_campaign.compare(_snapshot({"a": 1}, ["a"]), want, skips_allowed=False)["identical"]
    twice = kill_campaign.compare(_snapshot({"a": 2}, ["a"]), want, skips_allowed=False)
    assert (twice["identical"], twice["duplicates"], twice["lost"]) == (False, 1, 0)
    lost = kill_campaign.compare(_snapshot({}, []), want, skips_allowed=False)
    assert (lost["identical"], lost["duplicates"], lost["lost"]) == (False, 0, 2)  # the store's item and the call
    changed = kill_campaign.compare(_snapshot({"a": 1}, ["a"], "appended b"), want, skips_allowed=False)
    assert not changed["identical"] and "messages" in changed["diffs"][0]
    # A call recorded as not done (--resume-skip-uncertain, the write had happened) may say so, and only then.
    skipped = _snapshot({"a": 1}, ["a"], kill_campaign.SKIPPED + " (--resume-skip-uncertain)")
    assert kill_campaign.compare(skipped, want, skips_allowed=True)["identical"]
    assert not kill_campaign.compare(skipped, want, skips_allowed=False)["identical"]


def _record(kind: str, step: int, **extra: object) -> str:
    body: dict[str, object] = {"type": kind, "task_id": "t1#0", **extra}
    if kind == "intent":
        body.update(step=step, call={"name": "append_item", "arguments": {"item": "a"}}, source="authority")
    elif kind == "commit":
        body["steps"] = [{"step": step}]
    return json.dumps(body, separators=(",", ":")) + "\n"


def test_where_a_kill_landed_and_a_task_logged_twice(tmp_path: Path) -> None:
    log = tmp_path / "run-sa.log.jsonl"
    log.write_text('{"type":"log"}\n')
    before = kill_campaign.log_sizes(tmp_path)
    assert kill_campaign.landing(tmp_path, before)["at"] == "before-records"
    log.write_text(log.read_text() + _record("intent", 0))
    assert kill_campaign.landing(tmp_path, before) == {
        "at": "mid-call", "file": log.name, "task": "t1#0", "step": 0, "call": "append_item"}
    log.write_text(log.read_text() + _record("commit", 0) + '{"type":"ta')
    assert kill_campaign.landing(tmp_path, before)["at"] == "torn-record"
    whole = log.read_text().rsplit("\n", 1)[0] + "\n" + _record("task", 0, result={})
    log.write_text(whole + whole.split("\n", 1)[1])  # the task's records appended again (a part merged twice)
    snapshot = kill_campaign.Snapshot.of(tmp_path, None)
    assert snapshot.log_duplicates == 2 and len(snapshot.log_problems) == 2
