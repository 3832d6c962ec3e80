"""The snapshot protocol: fork the live environment, run calls in isolation, promote or drop.

One protocol for every backend (in-process copies, SQLite, overlay
filesystems, Docker containers)::

    snap = await backend.snapshot()            # of the live state
    box = await backend.fork(snap)             # an isolated sandbox from it
    obs = await box.execute(call)              # never touches live state
    deeper = await backend.fork(await backend.snapshot(box))   # chains fork from sandboxes
    await backend.commit(box)                  # box's state becomes live ...
    await backend.discard(deeper)              # ... or it is thrown away

Every state carries a *token*; every call that may change a state (any
effect but ``read_only``) gives it a new one.  A sandbox remembers its *lineage*, the tokens of the states it
descends from.  :meth:`SnapshotBackend.commit` accepts a sandbox only if the
current live token is in its lineage (the sandbox continues the live state;
committing the deepest fork of a chain commits the whole chain at once) and
refuses it otherwise (:class:`StaleSnapshotError`), so a stale speculation can
never overwrite newer live state.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentspec.checkpoint import decode as decode_checkpoint
from agentspec.checkpoint import encode as encode_checkpoint
from agentspec.env import Environment, StateSnapshot
from agentspec.errors import SnapshotError
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec


class StaleSnapshotError(SnapshotError):
    """A sandbox was committed after the live state had moved on since its fork."""


_tokens = itertools.count(1)


def new_token() -> str:
    """A fresh state token (unique within the process)."""
    return f"s{next(_tokens)}"


@dataclass(frozen=True)
class Snapshot:
    """A frozen point to fork from: backend-specific ``ref`` plus the lineage of state tokens it ends."""

    ref: Any
    lineage: tuple[str, ...]

    @property
    def token(self) -> str:
        return self.lineage[-1]


@runtime_checkable
class Sandbox(Protocol):
    """An isolated fork where speculative calls run."""

    id: str
    lineage: tuple[str, ...]
    """Tokens of the states this sandbox descends from, oldest first."""
    token: str
    """Token of the sandbox's current state."""

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation: ...


@runtime_checkable
class SnapshotBackend(Protocol):
    """A live environment that can be snapshotted, forked, and have a fork promoted to live."""

    live_token: str

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]: ...

    def effect(self, name: str) -> Effect: ...

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run a call on the live state (gives live a new token)."""
        ...

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        """Freeze the live state, or a sandbox's current state."""
        ...

    async def fork(self, snapshot: Snapshot) -> Sandbox: ...

    async def commit(self, sandbox: Sandbox) -> None:
        """Make the sandbox's state live; :class:`StaleSnapshotError` unless it descends from live."""
        ...

    async def discard(self, sandbox: Sandbox) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class Checkpointable(Protocol):
    """A backend whose live state lives in this process and can be written to the run log.

    Backends without it keep their live state outside the process (a directory tree, a database file, the
    world a function talks to): a resumed run adopts the logged steps and finds their effects already there.
    """

    def checkpoint(self) -> dict[str, Any] | None:
        """The live state as run-log data (see :mod:`agentspec.checkpoint`); None when it cannot be captured."""
        ...

    def restore_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Make a logged checkpoint the live state (a new token); ConfigError when it is not trusted data."""
        ...


def check_descends(sandbox: Sandbox, live_token: str) -> None:
    """Raise :class:`StaleSnapshotError` unless ``sandbox`` continues the live state."""
    if live_token not in sandbox.lineage:
        raise StaleSnapshotError(f"sandbox {sandbox.id} does not descend from the live state {live_token}")


_ids = itertools.count(1)


@dataclass
class InProcessSandbox:
    """A sandbox holding its own copy of a Python-state environment."""

    env: Environment
    lineage: tuple[str, ...]
    token: str = field(default_factory=new_token)
    id: str = field(default_factory=lambda: f"fork-{next(_ids)}")
    discarded: bool = False

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        if self.discarded:
            raise SnapshotError(f"sandbox {self.id} was discarded")
        observation = self.env.execute(call, requestor)
        if self.env.effect(call.name) is not Effect.READ_ONLY:
            self.token = new_token()
        return observation


class InProcessBackend:
    """The default backend for Python-state environments: forks are restored snapshots (copies).

    ``live`` is any :class:`agentspec.env.Environment`; a commit replaces it by
    the sandbox's environment object, so the swap is atomic.
    """

    def __init__(self, live: Environment) -> None:
        self.live = live
        self.live_token = new_token()

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.live.tool_specs(requestor)

    def effect(self, name: str) -> Effect:
        return self.live.effect(name)

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        observation = self.live.execute(call, requestor)
        if self.effect(call.name) is not Effect.READ_ONLY:
            self.live_token = new_token()  # read-only calls leave the state, and so every fork of it, valid
        return observation

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        if source is None:
            return Snapshot(ref=self.live.snapshot(), lineage=(self.live_token,))
        if not isinstance(source, InProcessSandbox) or source.discarded:
            raise SnapshotError("can only snapshot a live sandbox of this backend")
        return Snapshot(ref=source.env.snapshot(), lineage=(*source.lineage, source.token))

    async def fork(self, snapshot: Snapshot) -> InProcessSandbox:
        if not isinstance(snapshot.ref, StateSnapshot):
            raise SnapshotError("snapshot does not belong to an in-process backend")
        return InProcessSandbox(env=self.live.restore(snapshot.ref), lineage=snapshot.lineage, token=snapshot.token)

    async def commit(self, sandbox: Sandbox) -> None:
        if not isinstance(sandbox, InProcessSandbox) or sandbox.discarded:
            raise SnapshotError("can only commit a live sandbox of this backend")
        check_descends(sandbox, self.live_token)
        self.live = sandbox.env
        self.live_token = sandbox.token
        sandbox.discarded = True  # its state now *is* live; the sandbox must not be used again

    def checkpoint(self) -> dict[str, Any] | None:
        return encode_checkpoint(self.live)

    def restore_checkpoint(self, data: dict[str, Any]) -> None:
        self.live = decode_checkpoint(self.live, data)
        self.live_token = new_token()

    async def discard(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, InProcessSandbox):
            sandbox.discarded = True

    async def close(self) -> None:
        return None
