"""Reading runs back for a report: ``results.json`` (checked for its format and shape) and the run logs.

Two shapes are read, both written by ``agentspec run``:

* a ``--mode`` run: ``summary.modes`` holds each mode's figures and ``episodes`` maps mode -> records;
* a plain run: ``summary`` holds the figures and ``episodes`` is one list; it is read as one mode named
  ``plain``, its task times taken from each episode's timings.

A file naming another ``format`` than :data:`RESULTS_FORMAT` is refused; a file without one (written
before the key existed) is read only when it has the current shape::

    run = load_run(Path("runs/modes"))
    run.modes["smc"].summary["mean_task_wall_s"]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentspec.errors import ConfigError
from agentspec.runtime.metrics import percentile

RESULTS_FORMAT = "agentspec.results/v1"
"""The ``format`` key ``agentspec run`` writes at the top of ``results.json``."""
PLAIN = "plain"


class _ResultsFile(BaseModel):
    """The boundary check of a ``results.json``: its top level only; records are read leniently."""

    model_config = ConfigDict(extra="allow")

    format: str | None = None
    summary: dict[str, Any]
    episodes: dict[str, list[dict[str, Any]]] | list[dict[str, Any]]


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


def task_time(record: dict[str, Any]) -> float:
    """An episode's task time: the executor's (simulated on the virtual clock), else its timings."""
    metrics = (record.get("execution") or {}).get("metrics") or {}
    if "wall_s" in metrics:
        return float(metrics["wall_s"])
    timings = record.get("timings") or {}
    return float(timings.get("simulated_wall_s", timings.get("wall_s", 0.0)))


def episode_key(record: dict[str, Any]) -> str:
    """``task_id#trial``: what pairs an episode with the same episode in another mode."""
    return f"{record.get('task_id')}#{record.get('trial', 0)}"


def _plain_summary(summary: dict[str, Any], episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """A plain run's summary with the task-time figures a ``--mode`` summary carries, from its episodes."""
    times = [task_time(e) for e in episodes]
    if not times:
        return dict(summary)
    return {**summary, "mean_task_wall_s": round(sum(times) / len(times), 4),
            "p50_wall_s": round(percentile(times, 0.5), 4), "p95_wall_s": round(percentile(times, 0.95), 4)}


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


def _parse(folder: Path) -> _ResultsFile:
    file = folder / "results.json"
    if not folder.exists():
        raise ConfigError(f"{folder}: no such folder")
    if not file.is_file():
        raise ConfigError(f"{folder}: no results.json here (give the --out folder of an agentspec run)")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not a readable JSON file ({exc})") from exc
    if isinstance(raw, dict) and raw.get("format") not in (None, RESULTS_FORMAT):
        raise ConfigError(f"{file}: format {raw['format']!r} is not one this agentspec reads ({RESULTS_FORMAT})")
    try:
        parsed = _ResultsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise ConfigError(f"{file}: not the results.json of this agentspec version (at {where}: {first['msg']})") from exc
    return parsed


def load_run(folder: Path, name: str | None = None) -> Run:
    """Read one run folder; :class:`ConfigError` (one line) when it is missing, foreign or malformed."""
    parsed = _parse(folder)
    summary, file = parsed.summary, folder / "results.json"
    bench = summary.get("bench")
    if not isinstance(bench, str):
        raise ConfigError(f"{file}: summary.bench is missing: not the results.json of this agentspec version")
    modes: dict[str, ModeRun] = {}
    if isinstance(parsed.episodes, dict):
        if not isinstance(summary.get("modes"), dict) or set(summary["modes"]) != set(parsed.episodes):
            raise ConfigError(f"{file}: summary.modes does not match the episodes' modes: not a results.json of this version")
        for mode, records in parsed.episodes.items():
            modes[mode] = ModeRun(mode, summary["modes"][mode], records, read_log(folder / f"run-{mode}.log.jsonl"))
    else:
        if "modes" in summary or "reward_mean" not in summary:
            raise ConfigError(f"{file}: a plain run's summary needs reward_mean and no modes: not a results.json of this version")
        modes[PLAIN] = ModeRun(PLAIN, _plain_summary(summary, parsed.episodes), parsed.episodes)
    return Run(name or folder.name or str(folder), folder, bench, summary, modes)


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
