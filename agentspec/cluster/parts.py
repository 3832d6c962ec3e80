"""Per-task run logs ("parts") that Ray workers write, and their atomic merge into the mode's run log.

A local run appends every task's records to one ``run-<mode>.log.jsonl``.  On a
cluster, each task's records go to its own part file, written by the one worker
that plays it, under ``<out>/ray-parts/<mode>/``::

    out/run-sa.log.jsonl                      the mode's run log (the driver appends to it)
    out/ray-parts/sa/3f2a...e1.jsonl          one unfinished task's log (a worker appends to it)

When a task finishes, the driver appends its whole part to the run log in one
write (then fsync) and deletes the part.  A worker that dies leaves its part
behind: the retried task resumes from it, so no committed effect is applied
twice.  A merge cut short by a crash is safe to repeat: the run log replays a
task that starts again at step 0 as the later run (see
:mod:`agentspec.runtime.runlog`), and the part is only deleted once merged.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from agentspec.runtime.runlog.replay import TaskLog
from agentspec.runtime.runlog.writer import RunLog

PARTS_DIR = "ray-parts"


def parts_dir(out: str | Path, mode_name: str) -> Path:
    """The folder holding ``mode_name``'s unfinished task logs."""
    return Path(out) / PARTS_DIR / mode_name


def part_path(out: str | Path, mode_name: str, task_key: str) -> Path:
    """The part file of ``task_key`` (``"<task id>#<trial>"``); named by a hash, since task ids hold any character."""
    digest = hashlib.sha256(task_key.encode()).hexdigest()[:24]
    return parts_dir(out, mode_name) / f"{digest}.jsonl"


def clear_parts(out: str | Path, mode_name: str) -> None:
    """Forget a previous run's unfinished parts (a run without ``--resume`` starts afresh)."""
    shutil.rmtree(parts_dir(out, mode_name), ignore_errors=True)


def merge_part(part: Path, run_log: Path) -> None:
    """Append ``part``'s records (minus its header) to ``run_log`` in one write, fsync it, then delete ``part``.

    Each record's ``mac`` chains it to its own log, so the records are checked in the part first (a forged one is
    refused with its line, never signed again) and then signed again after the run log's last record."""
    records = RunLog.records(part)  # a torn last line (a worker killed mid-write) is left out
    if records:
        log = RunLog(run_log)  # creates the header (and cuts a torn tail) before the first merge
        try:
            log.extend(records)
        finally:
            log.close()
    part.unlink()


def merge_finished(out: str | Path, mode_name: str, run_log: Path) -> int:
    """Merge every part whose task finished (a driver stopped before merging it); the number merged.

    A part whose finished task the run log already holds was merged whole (the driver stopped between its append and
    its delete): it is deleted, not merged twice.  Unfinished parts stay where they are: the task's next attempt
    resumes from its own part."""
    folder = parts_dir(out, mode_name)
    parts = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not parts:
        return 0
    logged = RunLog.read(run_log)
    merged = 0
    for part in parts:
        finished = [key for key, log in RunLog.read(part).items() if log.result is not None]
        if not finished:
            continue
        if all(logged.get(key) is not None and logged[key].result is not None for key in finished):
            part.unlink()  # merged whole before the driver stopped, not yet deleted: again would log it twice
        else:
            merge_part(part, run_log)
        merged += 1
    return merged


def seed_part(part: Path, task_key: str, logged: TaskLog) -> None:
    """Start ``part`` with a task the run log already holds unfinished (e.g. a local run resumed on a cluster).

    The committed steps are written again as one batch (intents, then one commit with the checkpoint), so the part
    alone can resume the task; merged back, the run log replays them as the same task restarted at step 0."""
    log = RunLog(part)
    try:
        if logged.steps:
            for step in logged.steps:
                log.append({"type": "intent", **{k: v for k, v in step.items() if k != "observation"}})
            commit: dict[str, Any] = {
                "type": "commit", "task_id": task_key,
                "steps": [{"step": s["step"], "effect_id": s["effect_id"], "observation": s["observation"]}
                          for s in logged.steps],
            }  # fmt: skip
            if logged.checkpoint is not None:
                commit["checkpoint"] = logged.checkpoint
            log.append(commit)
    finally:
        log.close()

