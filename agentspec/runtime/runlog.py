"""The append-only run log and effect ids: committed effects are applied exactly once.

Every committed step gets an *effect id* = sha256(task id, step index,
canonical call).  The executor appends an ``intent`` record (flushed and
fsynced) before it changes the live state, and a ``commit`` record after,
carrying the observation and a checkpoint of the live state where the
environment can serialise it.  A resumed run reads the log back: finished
tasks are not run again; an unfinished task continues from its last
checkpoint with its committed history, so no committed effect is applied twice.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.types import Observation, ToolCall


def effect_id(task_id: str, step: int, call: ToolCall) -> str:
    """The identity of a committed effect (task, position, canonical call)."""
    return hashlib.sha256(f"{task_id}\x1f{step}\x1f{call.canonical()}".encode()).hexdigest()[:32]


@dataclass
class TaskLog:
    """What the log says about one task."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: bytes | None = None
    result: dict[str, Any] | None = None


class RunLog:
    """A JSON-lines file opened for appending; each record is flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def intent(self, task_id: str, step: int, call: ToolCall, source: str) -> str:
        eid = effect_id(task_id, step, call)
        self.append({"type": "intent", "task_id": task_id, "step": step, "effect_id": eid,
                     "call": {"name": call.name, "arguments": call.arguments, "id": call.id}, "source": source})
        return eid

    def commit(self, task_id: str, step: int, eid: str, observation: Observation, checkpoint: bytes | None) -> None:
        record: dict[str, Any] = {"type": "commit", "task_id": task_id, "step": step, "effect_id": eid,
                                  "observation": observation.model_dump(mode="json")}
        if checkpoint is not None:
            record["checkpoint"] = base64.b64encode(checkpoint).decode()
        self.append(record)

    def finish(self, task_id: str, result: dict[str, Any]) -> None:
        self.append({"type": "task", "task_id": task_id, "result": result})

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def read(path: Path) -> dict[str, TaskLog]:
        """Replay a log into per-task state; a torn last line (killed mid-write) is ignored."""
        tasks: dict[str, TaskLog] = defaultdict(TaskLog)
        if not path.is_file():
            return {}
        intents: dict[str, dict[str, Any]] = {}
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if number == len(lines):
                    break
                raise ConfigError(f"{path} line {number} is corrupt: {exc}") from exc
            task = tasks[record["task_id"]]
            if record["type"] == "intent":
                intents[record["effect_id"]] = record
            elif record["type"] == "commit":
                intent = intents.pop(record["effect_id"])
                if record["step"] == 0 and task.steps:
                    # The task was run again from the start into the same log: the later run is the one to resume.
                    task = tasks[record["task_id"]] = TaskLog()
                if record["step"] != len(task.steps):
                    # Resuming past a hole would replay the steps after it on a checkpoint that holds them.
                    raise ConfigError(f"{path} line {number}: task {record['task_id']!r} commits step "
                                      f"{record['step']} after {len(task.steps)} logged steps; the log has a gap "
                                      "and this task cannot be resumed from it")
                task.steps.append({**intent, "observation": record["observation"]})
                if "checkpoint" in record:
                    task.checkpoint = base64.b64decode(record["checkpoint"])
            elif record["type"] == "task":
                task.result = record["result"]
        return dict(tasks)
