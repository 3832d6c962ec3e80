"""Writing a run log: one signed, flushed and fsynced write per batch, chained after the log's last record.

A killed run may leave a torn last line; the writer cuts it before appending, so every record starts a line.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from agentspec.checkpoint import sign
from agentspec.errors import ConfigError
from agentspec.runtime.runlog import replay
from agentspec.runtime.runlog.records import VERSION, as_line, as_logged, chained, effect_id
from agentspec.types import Observation, ToolCall

_log = logging.getLogger("agentspec.runlog")


class RunLog:
    """A JSON-lines file opened for appending; each record is one signed write, flushed and fsynced."""

    def __init__(self, path: Path, config: Mapping[str, Any] | None = None) -> None:
        """Open ``path`` for appending; a new log starts with a header holding ``config`` (the run's settings)."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.dropped_tail = _drop_torn_tail(path)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._end, self._last = 0, ""  # the file's size after this writer's last record, and that record's mac
        if path.stat().st_size == 0:
            try:
                self.append({"type": "log", "version": VERSION, "run_id": secrets.token_hex(16),
                             "config": as_logged(config) if config is not None else None})
            except BaseException:
                self._file.close()  # no key to sign with, say: leave no open file behind
                raise

    def append(self, record: dict[str, Any]) -> None:
        """Append one record (signed after the log's last record), flushed and fsynced."""
        self.extend([record])

    def extend(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` (without ``mac``) in one write, each signed after the one before it, then fsync."""
        fd = self._file.fileno()
        with self._lock:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another writer of this file (an API run, a merge) appends whole chains
            try:
                end = os.fstat(fd).st_size
                previous = self._last if end == self._end else _last_mac(self.path, end)
                lines = []
                for record in records:
                    mac = sign(chained(previous, record))
                    lines.append(as_line(record, mac))
                    previous = mac
                self._file.write("".join(lines))
                self._file.flush()
                os.fsync(fd)
                self._end, self._last = os.fstat(fd).st_size, previous
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def intents(self, task_id: str, first_step: int, calls: list[ToolCall], source: str) -> list[str]:
        """Announce the effects about to be committed (one fsync for the batch); their effect ids."""
        eids = [effect_id(task_id, first_step + i, call) for i, call in enumerate(calls)]
        self.extend([
            {"type": "intent", "task_id": task_id, "step": first_step + i, "effect_id": eid,
             "call": {"name": call.name, "arguments": call.arguments, "id": call.id}, "source": source}
            for i, (call, eid) in enumerate(zip(calls, eids, strict=True))
        ])  # fmt: skip
        return eids

    def commit(self, task_id: str, entries: list[tuple[int, str, Observation]], checkpoint: dict[str, Any] | None,
               elapsed_s: float | None = None) -> None:
        """Record a committed batch ``(step, effect id, observation)`` and the state after it, atomically;
        ``elapsed_s``: the task's time then."""
        record: dict[str, Any] = {
            "type": "commit", "task_id": task_id,
            "steps": [{"step": step, "effect_id": eid, "observation": obs.model_dump(mode="json")} for step, eid, obs in entries],
        }  # fmt: skip
        if checkpoint is not None:
            record["checkpoint"] = checkpoint
        if elapsed_s is not None:
            record["elapsed_s"] = round(elapsed_s, 6)
        self.append(record)

    def finish(self, task_id: str, result: dict[str, Any], data: str | None = None) -> None:
        """Record a finished task's result; ``data``: the task's digest
        (:func:`~agentspec.runtime.runlog.records.data_digest`), checked on resume."""
        record: dict[str, Any] = {"type": "task", "task_id": task_id, "result": result}
        if data is not None:
            record["data"] = data
        self.append(record)

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def read(path: Path, config: Mapping[str, Any] | None = None) -> dict[str, replay.TaskLog]:
        """The log at ``path`` replayed into per-task state (:func:`agentspec.runtime.runlog.replay.read`)."""
        return replay.read(path, config)

    @staticmethod
    def records(path: Path) -> list[dict[str, Any]]:
        """The log's checked records after the header (:func:`agentspec.runtime.runlog.replay.records`)."""
        return replay.records(path)


def _line_start(handle: BinaryIO, end: int) -> int:
    """The offset just after the last newline before ``end`` in a binary file (0 if none): where its line starts."""
    while end > 0:
        step = min(end, 1 << 16)
        handle.seek(end - step)
        cut = handle.read(step).rfind(b"\n")
        if cut >= 0:
            return end - step + cut + 1
        end -= step
    return 0


def _last_mac(path: Path, end: int) -> str:
    """The ``mac`` of the record ending at ``end`` (a whole line): the one the next record is chained to."""
    with path.open("rb") as handle:
        start = _line_start(handle, end - 1)
        handle.seek(start)
        line = handle.read(end - start)
    try:
        mac = json.loads(line)["mac"]
    except (ValueError, TypeError, KeyError):
        mac = None
    if not isinstance(mac, str):
        raise ConfigError(f"{path}: its last record is not a signed run-log record; refusing to append to it")
    return mac


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
        keep = _line_start(handle, size)
        handle.truncate(keep)
        os.fsync(handle.fileno())
    _log.warning("%s: dropped a torn last record (%d bytes) left by a killed run", path, size - keep)
    return size - keep
