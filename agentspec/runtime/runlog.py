"""The append-only run log and effect ids: committed effects are applied exactly once.

Every committed step gets an *effect id* = sha256(task id, step index,
canonical call).  The executor appends ``intent`` records (flushed and fsynced)
before it changes the live state, and then one ``commit`` record for the whole
batch it committed (one step, or every step of a macro), carrying the
observations and a checkpoint of the live state after the batch (see
:mod:`agentspec.checkpoint`: data, never pickle from the log).  One record per
batch makes a batch atomic: a crash leaves the log with all of it or none.

A resumed run reads the log back: finished tasks are not run again; an
unfinished task continues from its last checkpoint with its committed history,
so no committed effect is applied twice.  The log is also a file a user may be
handed by someone else, so every line is validated: a malformed record, a
commit without its intent, an effect id that does not match its call, or a gap
in a task's steps is refused with the line number.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentspec.errors import ConfigError
from agentspec.types import Observation, ToolCall

VERSION = 2
_log = logging.getLogger("agentspec.runlog")


def effect_id(task_id: str, step: int, call: ToolCall) -> str:
    """The identity of a committed effect (task, position, canonical call)."""
    return hashlib.sha256(f"{task_id}\x1f{step}\x1f{call.canonical()}".encode()).hexdigest()[:32]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HeaderRecord(_Record):
    type: Literal["log"]
    version: int


class IntentRecord(_Record):
    type: Literal["intent"]
    task_id: str
    step: int = Field(ge=0)
    effect_id: str
    call: ToolCall
    source: str


class CommittedEntry(_Record):
    step: int = Field(ge=0)
    effect_id: str
    observation: Observation


class CommitRecord(_Record):
    type: Literal["commit"]
    task_id: str
    steps: list[CommittedEntry] = Field(min_length=1)
    checkpoint: dict[str, Any] | None = None


class TaskRecord(_Record):
    type: Literal["task"]
    task_id: str
    result: dict[str, Any]


_RECORD: TypeAdapter[Any] = TypeAdapter(
    Annotated[HeaderRecord | IntentRecord | CommitRecord | TaskRecord, Field(discriminator="type")]
)


@dataclass
class TaskLog:
    """What the log says about one task."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    """Committed steps in order: the intent's fields plus ``observation``."""
    checkpoint: dict[str, Any] | None = None
    """The live state after the last committed batch, when the environment could write one."""
    result: dict[str, Any] | None = None


class RunLog:
    """A JSON-lines file opened for appending; each record is one write, flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.dropped_tail = _drop_torn_tail(path)
        self._file = path.open("a", encoding="utf-8")
        if path.stat().st_size == 0:
            self.append({"type": "log", "version": VERSION})

    def append(self, record: dict[str, Any]) -> None:
        self._append_many([record])

    def _append_many(self, records: list[dict[str, Any]]) -> None:
        self._file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())

    def intents(self, task_id: str, first_step: int, calls: list[ToolCall], source: str) -> list[str]:
        """Announce the effects about to be committed (one fsync for the batch); their effect ids."""
        eids = [effect_id(task_id, first_step + i, call) for i, call in enumerate(calls)]
        self._append_many([
            {"type": "intent", "task_id": task_id, "step": first_step + i, "effect_id": eid,
             "call": {"name": call.name, "arguments": call.arguments, "id": call.id}, "source": source}
            for i, (call, eid) in enumerate(zip(calls, eids, strict=True))
        ])  # fmt: skip
        return eids

    def commit(self, task_id: str, entries: list[tuple[int, str, Observation]], checkpoint: dict[str, Any] | None) -> None:
        """Record a committed batch ``(step, effect id, observation)`` and the state after it, atomically."""
        record: dict[str, Any] = {
            "type": "commit", "task_id": task_id,
            "steps": [{"step": step, "effect_id": eid, "observation": obs.model_dump(mode="json")} for step, eid, obs in entries],
        }  # fmt: skip
        if checkpoint is not None:
            record["checkpoint"] = checkpoint
        self.append(record)

    def finish(self, task_id: str, result: dict[str, Any]) -> None:
        self.append({"type": "task", "task_id": task_id, "result": result})

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def read(path: Path) -> dict[str, TaskLog]:
        """Replay a log into per-task state; ConfigError (with the line) for anything but a torn last line."""
        if not path.is_file():
            return {}
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path} is not a run log (not UTF-8 text): {exc}") from exc
        lines = text.split("\n")
        torn = lines.pop()  # "" when the file ends with a newline; a record cut short by a kill otherwise
        if torn:
            _log.warning("%s: ignoring a torn last record (%d bytes) left by a killed run", path, len(torn.encode()))
        replay = _Replay(path)
        for number, line in enumerate(lines, 1):
            replay.add(number, line)
        return dict(replay.tasks)


class _Replay:
    """Folds validated records into per-task state."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tasks: dict[str, TaskLog] = defaultdict(TaskLog)
        self.intents: dict[str, IntentRecord] = {}

    def fail(self, number: int, why: str) -> ConfigError:
        return ConfigError(f"{self.path} line {number}: {why}; refusing to resume from this log")

    def add(self, number: int, line: str) -> None:
        try:
            record = _RECORD.validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise self.fail(number, f"not a run-log record ({where}: {first['msg']})") from exc
        if number == 1 and not (isinstance(record, HeaderRecord) and record.version == VERSION):
            found = record.version if isinstance(record, HeaderRecord) else "none"
            raise self.fail(number, f"run log version {found}, this agentspec writes version {VERSION}")
        if isinstance(record, HeaderRecord):
            if number != 1:
                raise self.fail(number, "a header in the middle of the log")
        elif isinstance(record, IntentRecord):
            if record.effect_id != effect_id(record.task_id, record.step, record.call):
                raise self.fail(number, "the effect id does not match its call")
            self.intents[record.effect_id] = record
        elif isinstance(record, CommitRecord):
            self.add_commit(number, record)
        else:
            self.tasks[record.task_id].result = record.result

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


def _drop_torn_tail(path: Path) -> int:
    """Cut a last line that a kill left without its newline, so the next record starts a line; bytes dropped."""
    if not path.is_file():
        return 0
    with path.open("r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        keep = size
        while keep > 0:
            step = min(keep, 1 << 16)
            handle.seek(keep - step)
            chunk = handle.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = keep - step + cut + 1
                break
            keep -= step
        handle.truncate(keep)
        os.fsync(handle.fileno())
    _log.warning("%s: dropped a torn last record (%d bytes) left by a killed run", path, size - keep)
    return size - keep
