"""What a run-log record holds and how it is signed: the schema, effect ids, the ``mac`` chain, task digests.

The writer and the reader both build on these, so a record is signed and checked by one definition.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agentspec.checkpoint import sign
from agentspec.types import Observation, ToolCall

VERSION = 4
"""4: a ``run_id`` in the header and chained ``mac``s (3 signed each record alone: records could be moved between logs)."""


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


RECORD: TypeAdapter[Any] = TypeAdapter(
    Annotated[HeaderRecord | IntentRecord | CommitRecord | TaskRecord, Field(discriminator="type")]
)


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
    return as_line(record, sign(chained(previous, record)))


def as_line(record: dict[str, Any], mac: str) -> str:
    """``record`` with its ``mac``, as one log line."""
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


def as_logged(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as it reads back from the log (tuples become lists...), so a comparison sees only real changes."""
    loaded: dict[str, Any] = json.loads(json.dumps(value, default=_plain))
    return loaded


def config_differences(logged: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Each setting that differs between a log's configuration and this run's, as ``name (log: X, now: Y)``."""
    def shown(value: Any) -> str:
        text = json.dumps(value, sort_keys=True)
        return text if len(text) <= 60 else text[:57] + "..."

    return [f"{name} (log: {shown(logged.get(name))}, now: {shown(now.get(name))})"
            for name in sorted(set(logged) | set(now)) if logged.get(name) != now.get(name)]
