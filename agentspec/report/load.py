"""Reading runs back for a report: ``results.json`` (through :meth:`agentspec.results.Results.load`, which checks
its format and shape, and reads the previous format's plain runs as one mode named ``plain``) and the run logs::

    run = load_run(Path("runs/modes"))
    run.modes["smc"].summary["mean_task_wall_s"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.results import Results


@dataclass(frozen=True)
class LogStats:
    """What a mode's run log (``run-MODE.log.jsonl``) holds: records by type and the tasks it finished."""

    path: Path
    records: dict[str, int]
    finished_tasks: int


@dataclass(frozen=True)
class ModeRun:
    """One mode of one run: its summary figures and its episode records."""

    mode: str
    summary: dict[str, Any]
    episodes: list[dict[str, Any]]
    log: LogStats | None = None


@dataclass(frozen=True)
class Run:
    """One run folder, read back."""

    name: str
    path: Path
    bench: str
    summary: dict[str, Any]
    modes: dict[str, ModeRun] = field(default_factory=dict)


def episode_key(record: dict[str, Any]) -> str:
    """``task_id#trial``: what pairs an episode with the same episode in another mode."""
    return f"{record.get('task_id')}#{record.get('trial', 0)}"


def read_log(path: Path) -> LogStats | None:
    """Count a run log's records by type; None when there is no log. A corrupt line is a one-line error."""
    if not path.is_file():
        return None
    records: dict[str, int] = {}
    finished = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                kind = json.loads(line).get("type", "?")
            except (json.JSONDecodeError, AttributeError) as exc:
                raise ConfigError(f"{path} line {number}: not a run log record ({exc})") from exc
            records[kind] = records.get(kind, 0) + 1
            finished += kind == "task"
    return LogStats(path, records, finished)


def load_run(folder: Path, name: str | None = None) -> Run:
    """Read one run folder; :class:`ConfigError` (one line) when it is missing, foreign or malformed."""
    if not folder.exists():
        raise ConfigError(f"{folder}: no such folder")
    results = Results.load(folder)
    summary = results.summary.as_dict()
    modes = {mode: ModeRun(mode, summary["modes"][mode], results.records(mode),
                           read_log(folder / f"run-{mode}.log.jsonl"))
             for mode in results.episodes}
    return Run(name or folder.name or str(folder), folder, results.summary.bench, summary, modes)


def load_runs(folders: list[Path]) -> list[Run]:
    """Read several runs of one bench; two folders with one name are told apart by their path."""
    if not folders:
        raise ConfigError("give at least one run folder")
    names = [f.resolve().name for f in folders]
    runs = []
    for folder, name in zip(folders, names, strict=True):
        label = name if names.count(name) == 1 else str(folder)
        runs.append(load_run(folder, label))
    benches = {run.bench for run in runs}
    if len(benches) > 1:
        listed = ", ".join(f"{run.path} is {run.bench}" for run in runs)
        raise ConfigError(f"a report compares runs of one bench; these mix benches: {listed}")
    return runs
