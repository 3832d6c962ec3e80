"""Reading runs back for a report: ``results.json`` (through :meth:`agentspec.results.Results.load`, which checks
its format and shape, and reads the previous format's plain runs as one mode named ``plain``) and the run logs::

    run = load_run(Path("runs/modes"))
    run.modes["smc"].summary["mean_task_wall_s"]
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentspec.bench.protocol import recording_at
from agentspec.errors import ConfigError
from agentspec.results import Results
from agentspec.runtime.conversation import SAY
from agentspec.runtime.recording import RecordedEpisode, Recording


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


RECORDED = "recorded"
"""The one mode of a recorded run of a real agent, as a report shows it."""


def recording_run(recording: Recording, path: Path, bench: str, name: str | None = None) -> Run:
    """A recorded run of a real agent (read by its bench: tau2's simulation files) as a run of one mode,
    ``recorded``: each episode's recorded reward, checks, calls and, on its timeline, the time each decision and
    user turn took."""
    records = [_recorded_record(episode) for episode in recording.episodes]
    times = [r["timings"]["wall_s"] for r in records]
    rewards = [r["reward"] for r in records]
    mode = {"tasks": len(recording.task_ids()), "episodes": len(records),
            "reward_mean": round(sum(rewards) / len(rewards), 4) if rewards else 0.0,
            "mean_task_wall_s": round(sum(times) / len(times), 4) if times else None,
            "terminations": dict(Counter(str(r["termination"]) for r in records))}
    summary = {"bench": bench, "agent": f"recorded: {recording.agent_model}", "user": recording.user_model,
               "tasks": mode["tasks"], "trials": recording.trials(),
               "play": "solo" if recording.solo else "normal", "policy": recording.policy, "clock": "recorded",
               "recording": {"file": recording.source, "sha256": recording.digest}, "modes": {RECORDED: mode}}
    return Run(name or path.name, path, bench, summary, {RECORDED: ModeRun(RECORDED, mode, records)})


def _recorded_record(episode: RecordedEpisode) -> dict[str, Any]:
    """An episode record (as ``results.json`` holds one) of a recorded episode, its timeline from recorded times."""
    events: list[dict[str, Any]] = []
    at = 0.0

    def span(lane: str, seconds: float | None, label: str) -> None:
        nonlocal at
        events.append({"lane": lane, "start": at, "end": at + (seconds or 0.0), "label": label, "kind": RECORDED})
        at += seconds or 0.0

    def turn(index: int) -> None:
        if index < len(episode.turns):
            for made in episode.turns[index].calls:
                span("user-tool", made.seconds, made.call.name)
            span("user", episode.turns[index].reply_seconds, "reply")

    turns = 0
    if not episode.solo:
        turn(turns)
        turns += 1
    for decision in episode.decisions:
        span("authority", decision.seconds, decision.call.name if decision.call else "end")
        if decision.call is not None and decision.call.name == SAY:
            turn(turns)
            turns += 1
    checks: dict[str, list[dict[str, Any]]] = {"env_assertions": [], "actions": []}
    for check in episode.checks:
        checks["env_assertions" if check.kind == "env" else "actions"].append(
            {"kind": check.kind, "name": check.name, "arguments": check.arguments, "passed": check.passed})
    messages = [m.model_dump(mode="json", exclude_defaults=True) for m in episode.messages]
    wall = episode.duration_s if episode.duration_s is not None else at
    return {"task_id": episode.task_id, "trial": episode.trial, "reward": episode.reward or 0.0,
            "termination": episode.termination.value if episode.termination else None,
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in messages), "evaluation": checks,
            "timings": {"wall_s": wall}, "execution": {"mode": RECORDED, "metrics": {"wall_s": wall}, "timeline": events},
            "error": None, "messages": messages}


def load_runs(folders: list[Path], bench: Any = None) -> list[Run]:
    """Read several runs of one bench; two folders with one name are told apart by their path.  With ``bench``, a
    recorded run of a real agent it reads (tau2's simulation files) is one too (:func:`recording_run`)."""
    if not folders:
        raise ConfigError("give at least one run folder")
    names = [f.resolve().name for f in folders]
    runs = []
    for folder, name in zip(folders, names, strict=True):
        label = name if names.count(name) == 1 else str(folder)
        recording = recording_at(bench, folder) if bench is not None else None
        if recording is not None:
            runs.append(recording_run(recording, folder, bench.name, label))
            continue
        try:
            runs.append(load_run(folder, label))
        except ConfigError as exc:
            hint = "" if bench is not None else " (a recorded run of a real agent is read with --bench BENCH)"
            raise ConfigError(f"{exc}{hint}") from None
    benches = {run.bench for run in runs}
    if len(benches) > 1:
        listed = ", ".join(f"{run.path} is {run.bench}" for run in runs)
        raise ConfigError(f"a report compares runs of one bench; these mix benches: {listed}")
    return runs
