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

Every record carries ``mac``, an HMAC-SHA256 under this user's key (:func:`agentspec.checkpoint.sign`, the key
that signs pickled checkpoints) of the previous record's ``mac`` followed by the record (canonical JSON, without
``mac``); the header, which holds a random ``run_id``, starts the chain.  So a record edited after it was written (a
reward, a message, a checkpoint), written by anyone without the key, taken from another log (another run of the same
tasks under other settings), removed, or moved is refused with its line before anything is used.  The header
records the run's configuration (:meth:`agentspec.run_spec.RunSpec.result_settings`): a resume under other settings
is refused with the fields that differ, and a finished task's record holds a digest of the task's data, so a task
whose data changed is not taken from the log.

One run at a time writes into an output folder: :func:`locked_out` holds an exclusive lock on
``<out>/.agentspec.lock`` for the whole run, and a second run into the same folder is refused with the holder.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import secrets
import socket
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agentspec.checkpoint import key_path, sign, signed_by_me
from agentspec.errors import ConfigError, first_problem
from agentspec.types import Observation, Step, ToolCall

VERSION = 4
"""4: a ``run_id`` in the header and chained ``mac``s (3 signed each record alone: records could be moved between logs)."""
LOCK_NAME = ".agentspec.lock"
_log = logging.getLogger("agentspec.runlog")


def effect_id(task_id: str, step: int, call: ToolCall) -> str:
    """The identity of a committed effect (task, position, canonical call)."""
    return hashlib.sha256(f"{task_id}\x1f{step}\x1f{call.canonical()}".encode()).hexdigest()[:32]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HeaderRecord(_Record):
    type: Literal["log"]
    version: int
    run_id: str
    """Random per log: two logs of the same tasks and settings still start different chains."""
    config: dict[str, Any] | None = None
    """The settings that decide the run's results; None for a log without one (the Python API's, a task's part)."""


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
    elapsed_s: float | None = None
    """The task's time at the commit (on the run's clock): where a resumed task's time goes on from."""


class TaskRecord(_Record):
    type: Literal["task"]
    task_id: str
    result: dict[str, Any]
    data: str | None = None
    """:func:`data_digest` of the task the result is for, when the writer knew it."""


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


def canonical(record: Mapping[str, Any]) -> bytes:
    """A record's JSON with sorted keys, without ``mac``: what its ``mac`` signs after the previous ``mac``."""
    body = {k: v for k, v in record.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def chained(previous: str, record: Mapping[str, Any]) -> bytes:
    """The bytes ``record``'s ``mac`` signs when it follows a record whose ``mac`` is ``previous`` ("" for the
    header): binding each record to the one before it, back to the header's random run id."""
    return previous.encode() + canonical(record)


def signed_line(record: dict[str, Any], previous: str) -> str:
    """``record`` as one log line after a record whose ``mac`` is ``previous`` ("" for a header)."""
    return _line(record, sign(chained(previous, record)))


def _line(record: dict[str, Any], mac: str) -> str:
    return json.dumps({**record, "mac": mac}, separators=(",", ":")) + "\n"  # ``type`` stays the first key


def data_digest(value: Any) -> str:
    """sha256 of a task's content (a pydantic model, dataclass, mapping or JSON value), stable across processes."""
    return hashlib.sha256(json.dumps(value, default=_plain, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, ToolCall):
        return {"name": value.name, "arguments": value.arguments}  # its id is made afresh on every load
    if isinstance(value, BaseModel):
        return {name: getattr(value, name) for name in type(value).model_fields}  # nested calls come here again
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, (tuple, list)):
        return list(value)
    if isinstance(value, (os.PathLike, bytes)):
        return str(value)
    return type(value).__qualname__  # never repr(): an address would differ between the run and its resume


def config_differences(logged: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Each setting that differs between a log's configuration and this run's, as ``name (log: X, now: Y)``."""
    def shown(value: Any) -> str:
        text = json.dumps(value, sort_keys=True)
        return text if len(text) <= 60 else text[:57] + "..."

    return [f"{name} (log: {shown(logged.get(name))}, now: {shown(now.get(name))})"
            for name in sorted(set(logged) | set(now)) if logged.get(name) != now.get(name)]


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
                             "config": _json(config) if config is not None else None})
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
                    lines.append(_line(record, mac))
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
        """Record a finished task's result; ``data``: :func:`data_digest` of the task, checked on resume."""
        record: dict[str, Any] = {"type": "task", "task_id": task_id, "result": result}
        if data is not None:
            record["data"] = data
        self.append(record)

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def read(path: Path, config: Mapping[str, Any] | None = None) -> dict[str, TaskLog]:
        """Replay a log into per-task state; ConfigError (with the line) for anything but a torn last line.

        ``config``: this run's settings; a log written under other settings (or recording none) is refused with
        the fields that differ."""
        replay = _replay(path, keep=False)
        if replay is None:
            return {}
        if config is not None:
            _check_config(path, replay.config, _json(config))
        return dict(replay.tasks)

    @staticmethod
    def records(path: Path) -> list[dict[str, Any]]:
        """The records after the header (without ``mac``), in order, once checked as :meth:`read` checks them: what
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


def _json(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as it reads back from the log (tuples become lists...), so a comparison sees only real changes."""
    loaded: dict[str, Any] = json.loads(json.dumps(value, default=_plain))
    return loaded


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
            record = _RECORD.validate_python(raw)
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


# --- one run per output folder ------------------------------------------------------------

_held: dict[tuple[Path, int], int] = {}  # (folder, thread) -> depth: the same run may take its folder again



def _open_lock(path: Path, folder: str | os.PathLike[str]) -> int:
    """The lock file, opened for writing the holder into it: only a regular file of ours with one link, never
    through a symlink, so a folder someone else prepared cannot make the run overwrite another file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out {folder}: cannot open its lock file {path.name} ({exc.strerror}); remove it if it "
                          "is not a plain file") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
        os.close(fd)
        raise ConfigError(f"--out {folder}: its lock file {path.name} is not a plain file of yours with one link; "
                          "remove it")
    return fd

@contextmanager
def locked_out(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold ``folder`` (a run's ``--out``, created) for the block: an exclusive ``flock`` on its lock file.

    A second run into the folder, in another process or thread, gets a :class:`ConfigError` naming the folder and
    the holder at once, instead of interleaving its records with the first.  Taking it again inside the block (the
    command line around :func:`agentspec.pipeline.run`) is free.  The kernel drops the lock when the holder dies.
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    key = (path.resolve(), threading.get_ident())
    if key in _held:
        _held[key] += 1
        try:
            yield path
        finally:
            _held[key] -= 1
        return
    fd = _open_lock(key[0] / LOCK_NAME, folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a run that has not said who it is"
        os.close(fd)
        raise ConfigError(f"--out {folder} is in use by another run ({holder}): wait for it to finish, or give "
                          "another --out") from None
    try:
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n".encode(), 0)
        _held[key] = 1
        try:
            yield path
        finally:
            del _held[key]
    finally:
        os.close(fd)  # releases the lock
