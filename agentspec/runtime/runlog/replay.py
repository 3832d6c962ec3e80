"""Reading a run log back: every line checked (signature chain, schema, intents before commits, no gaps) and
folded into per-task state, which is what a resumed run adopts.

A log may come from someone else, so nothing in it is used before the whole file has been checked.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentspec.checkpoint import key_path, signed_by_me
from agentspec.errors import ConfigError, first_problem
from agentspec.runtime.runlog.records import (
    RECORD,
    VERSION,
    CommitRecord,
    HeaderRecord,
    IntentRecord,
    as_logged,
    chained,
    config_differences,
    effect_id,
)
from agentspec.types import Observation, Step, ToolCall

_log = logging.getLogger("agentspec.runlog")


@dataclass
class TaskLog:
    """What the log says about one task."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    """Committed steps in order: the intent's fields plus ``observation``."""
    checkpoint: dict[str, Any] | None = None
    """The live state after the last committed batch, when the environment could write one."""
    elapsed_s: float = 0.0
    """The task's time at its last commit (0 for a log that does not record it)."""
    result: dict[str, Any] | None = None
    data: str | None = None
    """The digest of the task's data its result was logged with (None: not recorded)."""
    uncertain: list[dict[str, Any]] = field(default_factory=list)
    """Intents logged for the steps after the committed ones and never committed: calls the run started before it
    stopped, whose effect may or may not have reached the live state (the intent's fields)."""

    def committed(self) -> list[Step]:
        """The committed steps as :class:`~agentspec.types.Step` values, in order: what a resumed executor adopts
        and what a finished task's logged result holds (one reading of the log for both)."""
        return [Step(index=i, call=ToolCall.model_validate(r["call"]),
                     observation=Observation.model_validate(r["observation"]), source=r["source"],
                     effect_id=r["effect_id"])
                for i, r in enumerate(self.steps)]


def read(path: Path, config: Mapping[str, Any] | None = None) -> dict[str, TaskLog]:
    """Replay a log into per-task state; ConfigError (with the line) for anything but a torn last line.

    ``config``: this run's settings; a log written under other settings (or recording none) is refused with
    the fields that differ."""
    replay = _replay(path, keep=False)
    if replay is None:
        return {}
    if config is not None:
        _check_config(path, replay.config, as_logged(config))
    return dict(replay.tasks)


def records(path: Path) -> list[dict[str, Any]]:
    """The records after the header (without ``mac``), in order, once checked as :func:`read` checks them: what
    may be signed again into another log (:func:`agentspec.cluster.parts.merge_part`)."""
    replay = _replay(path, keep=True)
    return replay.records[1:] if replay is not None else []


def _replay(path: Path, *, keep: bool) -> _Replay | None:
    """The checked log at ``path`` (None when there is none); ConfigError (with the line) for anything but a torn
    last line.  ``keep``: hold every record too."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not a run log (not UTF-8 text): {exc}") from exc
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline; a record cut short by a kill otherwise
    if torn:
        _log.warning("%s: ignoring a torn last record (%d bytes) left by a killed run", path, len(torn.encode()))
    if not lines:
        return None  # killed while it wrote its header: it holds nothing to resume
    replay = _Replay(path, keep=keep)
    for number, line in enumerate(lines, 1):
        replay.add(number, line)
    replay.settle()
    return replay

def _check_config(path: Path, logged: dict[str, Any] | None, now: dict[str, Any]) -> None:
    again = "run with the log's settings, or pass --overwrite to start afresh"
    if logged is None:
        raise ConfigError(f"{path} records no run configuration (not written by agentspec run): cannot --resume "
                          f"from it; {again}")
    if differences := config_differences(logged, now):
        raise ConfigError(f"{path} was written with other settings: {'; '.join(differences)}; refusing to resume "
                          f"(its results would be reported under this run's settings): {again}")


class _Replay:
    """Folds validated records into per-task state."""

    def __init__(self, path: Path, *, keep: bool = False) -> None:
        self.path = path
        self.tasks: dict[str, TaskLog] = defaultdict(TaskLog)
        self.intents: dict[str, IntentRecord] = {}
        self.config: dict[str, Any] | None = None
        self.previous = ""  # the mac the next record is chained to: none before the header
        self.keep = keep
        self.records: list[dict[str, Any]] = []

    def fail(self, number: int, why: str) -> ConfigError:
        return ConfigError(f"{self.path} line {number}: {why}; refusing to resume from this log")

    def add(self, number: int, line: str) -> None:
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise self.fail(number, f"not a run-log record (not JSON: {exc})") from exc
        if not isinstance(raw, dict):
            raise self.fail(number, f"not a run-log record (a JSON {type(raw).__name__}, not an object)")
        if number == 1 and raw.get("type") != "log":
            raise self.fail(number, "not a run-log record (a log starts with its header)")
        if number == 1 and raw.get("version") != VERSION:
            raise self.fail(number, f"run log version {raw.get('version')}, this agentspec writes version {VERSION}")
        mac = raw.pop("mac", None)
        if not isinstance(mac, str):
            raise self.fail(number, "an unsigned record (not written by agentspec, or edited)")
        if not signed_by_me(chained(self.previous, raw), mac):
            raise self.fail(number, f"the record's signature does not match: the log was changed after it was "
                                    f"written (a record edited, removed, moved, or taken from another log), or "
                                    f"written under another user's key ({key_path()})")
        self.previous = mac
        if self.keep:
            self.records.append(raw)
        try:
            record = RECORD.validate_python(raw)
        except ValidationError as exc:
            raise self.fail(number, f"not a run-log record ({first_problem(exc)})") from exc
        if isinstance(record, HeaderRecord):
            if number != 1:
                raise self.fail(number, "a header in the middle of the log")
            self.config = record.config
        elif isinstance(record, IntentRecord):
            if record.effect_id != effect_id(record.task_id, record.step, record.call):
                raise self.fail(number, "the effect id does not match its call")
            self.intents[record.effect_id] = record
        elif isinstance(record, CommitRecord):
            self.add_commit(number, record)
        else:
            task = self.tasks[record.task_id]
            task.result, task.data = record.result, record.data

    def settle(self) -> None:
        """Keep each intent no commit followed with its task, when it is for a step after the committed ones and the
        task has no result: the calls a stopped run may or may not have applied."""
        for intent in sorted(self.intents.values(), key=lambda i: i.step):
            task = self.tasks[intent.task_id]
            if task.result is None and intent.step >= len(task.steps):
                task.uncertain.append(intent.model_dump(mode="json", exclude={"type"}))

    def add_commit(self, number: int, record: CommitRecord) -> None:
        task = self.tasks[record.task_id]
        if record.steps[0].step == 0 and task.steps:
            # The task was run again from the start into the same log: the later run is the one to resume.
            task = self.tasks[record.task_id] = TaskLog()
        for entry in record.steps:
            intent = self.intents.pop(entry.effect_id, None)
            if intent is None or intent.task_id != record.task_id or intent.step != entry.step:
                raise self.fail(number, f"task {record.task_id!r} commits step {entry.step} without its intent")
            if entry.step != len(task.steps):
                # Resuming past a hole would replay the steps after it on a checkpoint that holds them.
                raise self.fail(number, f"task {record.task_id!r} commits step {entry.step} after {len(task.steps)} "
                                        "logged steps (a gap)")
            task.steps.append({**intent.model_dump(mode="json", exclude={"type"}),
                               "observation": entry.observation.model_dump(mode="json")})
        task.checkpoint = record.checkpoint
        task.elapsed_s = record.elapsed_s or 0.0

