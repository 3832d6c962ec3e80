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

Writing a backend: subclass :class:`LineageBackend`.  The base keeps all of
that bookkeeping once, for every backend:

- tokens and lineage: live and each sandbox are a :class:`Branch` (a state plus
  its token, lineage and lock); a call that may write gives its branch a new
  token, a snapshot ends the lineage of the branch it froze, a commit checks
  :func:`check_descends` and hands the sandbox's token to live;
- locks: one call, snapshot or commit at a time per branch; a commit holds
  live's lock and the sandbox's, and runs shielded from cancellation so a swap
  is never left half done;
- sandboxes: which ones are alive, refusing a discarded one or another
  backend's, discard stopping a running call (the call answers "the sandbox was
  discarded while the call ran"), and every call's deadline (it answers "the
  call ran past ...s and was killed").

A strategy supplies only its mechanism, on its own state type (a copied
environment, a database connection, a directory tree, a container):

- ``_freeze(state)``: a snapshot ``ref`` of the state (may reuse the last one
  while the state is unchanged); ``_accepts(ref)``: whether a ref is its own;
- ``_fork_state(ref)``: a new state from a ref; ``_branch(...)``: the sandbox
  object that holds it (its own class, so users see ``box.path`` and the like);
- ``_run(state, step, call, requestor)``: run one call (``_plan`` may answer a
  wrong call first, without taking a lock or a token; ``_label`` marks what a
  call returns, ``_deadline_s`` bounds it);
- ``_promote(state, live)``: make a sandbox's state live, drop what is no
  longer needed, return the new live state; ``_drop(state)``: free a
  discarded sandbox's state; ``_stop(branch)``: stop its running call;
- ``tool_specs``, ``effect``, and ``start``/``close`` for its resources
  (``close`` calls :meth:`LineageBackend._forget_sandboxes` first).

:class:`InProcessBackend` is the smallest such strategy.
"""

from __future__ import annotations

import itertools
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, Self, TypeVar, runtime_checkable

import anyio

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

    # Read-only here (properties): a wrapper's sandbox forwards them; the backend, not a caller, moves them.
    @property
    def id(self) -> str: ...

    @property
    def lineage(self) -> tuple[str, ...]:
        """Tokens of the states this sandbox descends from, oldest first."""
        ...

    @property
    def token(self) -> str:
        """Token of the sandbox's current state."""
        ...

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation: ...


@runtime_checkable
class SnapshotBackend(Protocol):
    """A live environment that can be snapshotted, forked, and have a fork promoted to live."""

    @property
    def live_token(self) -> str:
        """Token of the live state (read-only here: a wrapper forwards it)."""
        ...

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

    Backends without it keep their live state outside the process (a scratch tree, a database file, the world a
    function talks to): a resumed run replays the logged steps on a fresh one, or finds their effects already
    there (:func:`resume_by`).
    """

    def checkpoint(self) -> dict[str, Any] | None:
        """The live state as run-log data (see :mod:`agentspec.checkpoint`); None when it cannot be captured."""
        ...

    def restore_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Make a logged checkpoint the live state (a new token); ConfigError when it is not trusted data."""
        ...


ResumeBy = Literal["checkpoint", "replay", "world"]
"""How a resumed run gets back the live state a task's committed steps left (:func:`resume_by`):

* ``checkpoint``: the run log holds it (the state lives in this process: :class:`Checkpointable`);
* ``replay``: the environment is made afresh for every episode (a scratch tree, a container, an AppWorld world) and
  answers deterministically, so the committed calls are run again on it, each checked against its logged answer;
* ``world``: the state lives outside agentspec and outlives it (an MCP server, a database file the user named): the
  committed effects are there already.

A call a stopped run started and never confirmed (an intent without its commit) is harmless under the first two:
the state it may have changed is gone.  Under ``world`` it may have happened: read-only and idempotent calls may
run again, any other stops the resume unless the user says to retry it or to record it as not done."""


def resume_by(backend: object) -> ResumeBy:
    """How ``backend``'s live state comes back on resume (:data:`ResumeBy`): a backend declares ``replay`` with a
    ``resume_by`` attribute; :class:`Checkpointable` ones resume from their checkpoint; every other is ``world``."""
    if isinstance(backend, Checkpointable):
        return "checkpoint"
    return "replay" if getattr(backend, "resume_by", "world") == "replay" else "world"


def check_descends(sandbox: Sandbox, live_token: str) -> None:
    """Raise :class:`StaleSnapshotError` unless ``sandbox`` continues the live state."""
    if live_token not in sandbox.lineage:
        raise StaleSnapshotError(f"sandbox {sandbox.id} does not descend from the live state {live_token}")


def error_observation(call: ToolCall, requestor: Requestor, text: str) -> Observation:
    """The observation of a call that failed (``"Error: ..."``), as a tool error is shown to the agent."""
    return Observation(call_id=call.id, name=call.name, content=f"Error: {text}", error=True, requestor=requestor)


S = TypeVar("S")
"""A strategy's state type: what one branch (live or a sandbox) holds."""

_ids = itertools.count(1)


def _lock() -> anyio.Lock:
    # fast_acquire: an uncontended lock does not yield, so a backend whose calls never await (in-process)
    # schedules exactly as it did without locks.
    return anyio.Lock(fast_acquire=True)


class Calls(ABC, Generic[S]):
    """How one call runs on a state: the part of a strategy a :class:`Branch` drives."""

    def _plan(self, call: ToolCall, requestor: Requestor) -> Any:
        """What ``_run`` gets as ``step``, or an Observation that answers a wrong call without running it."""
        return call

    @abstractmethod
    async def _run(self, state: S, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        """Run one call on ``state`` (the caller holds its branch's lock)."""

    @abstractmethod
    def _effect_in(self, state: S, name: str) -> Effect:
        """The effect class of tool ``name`` on ``state``."""

    def _label(self, observation: Observation) -> Observation:
        """``observation`` as the caller sees it (sandbox backends mark their isolation opt-ins here)."""
        return observation

    def _deadline_s(self) -> float | None:
        """The wall-clock limit of a call; None: none."""
        return None


@dataclass(eq=False, kw_only=True)
class Branch(Generic[S]):
    """One line of states: the live slot of a backend, or a sandbox.  See the module docstring.

    Holds the state, its token and lineage, the lock that serialises calls,
    snapshots and commits on it, and the scope of the call running in it.
    """

    calls: Calls[S] = field(repr=False)
    state: S = field(repr=False)
    lineage: tuple[str, ...]
    token: str
    id: str = ""
    discarded: bool = False
    lock: anyio.Lock = field(default_factory=_lock, repr=False)
    running: anyio.CancelScope | None = field(default=None, repr=False)

    prefix = "fork"

    def __post_init__(self) -> None:
        if not self.id:
            self.id = f"{self.prefix}-{next(_ids)}"

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run a call on this branch's state (a call that may write gives it a new token)."""
        self._check_usable()
        step = self.calls._plan(call, requestor)
        if isinstance(step, Observation):
            return step
        async with self.lock:
            self._check_usable()
            observation = await self._run_killable(step, call, requestor)
            if self.calls._effect_in(self.state, call.name) is not Effect.READ_ONLY:
                self.token = new_token()  # read-only calls leave the state, and every fork of it, valid
        return observation

    async def _run_killable(self, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        limit = self.calls._deadline_s()
        deadline = anyio.current_time() + limit if limit is not None else float("inf")
        with anyio.CancelScope(deadline=deadline) as scope:
            self.running = scope
            try:
                return self.calls._label(await self.calls._run(self.state, step, call, requestor))
            finally:
                self.running = None
        if self.discarded:
            return self.calls._label(error_observation(call, requestor, "the sandbox was discarded while the call ran"))
        return self.calls._label(error_observation(call, requestor, f"the call ran past {limit}s and was killed"))

    def _check_usable(self) -> None:
        if self.discarded:
            raise SnapshotError(f"sandbox {self.id} was discarded")


def _head_field(name: str, doc: str) -> property:
    """An attribute of the backend that reads and writes ``name`` of its live branch."""
    return property(lambda self: getattr(self._head, name), lambda self, value: setattr(self._head, name, value), doc=doc)


class LineageBackend(Calls[S]):
    """The base every snapshot backend builds on: tokens, lineage, locks and sandboxes, kept once.

    See the module docstring for what it guarantees and what a strategy provides.
    Use a backend as ``async with Backend(...) as backend:`` (or ``await
    Backend.open(...)`` and ``await backend.close()``).
    """

    kind = "snapshot"
    """The backend's name in messages."""

    def __init__(self) -> None:
        # The live slot exists before start (its token is the backend's identity for stale checks); its
        # state arrives with start (``_set_live``).
        self._head: Branch[S] = self._branch(None, (), new_token())  # type: ignore[arg-type]
        self._started = False
        self._sandboxes: weakref.WeakSet[Branch[S]] = weakref.WeakSet()

    live_token: str = _head_field("token", "Token of the live state.")  # type: ignore[assignment]

    # ------------------------------------------------------------------ what a strategy provides

    def _branch(self, state: S, lineage: tuple[str, ...], token: str) -> Branch[S]:
        """The sandbox object holding ``state`` (override to give sandboxes their own class)."""
        return Branch(calls=self, state=state, lineage=lineage, token=token)

    @abstractmethod
    async def _freeze(self, state: S) -> Any:
        """A snapshot ref of ``state`` (the caller holds its branch's lock)."""

    @abstractmethod
    def _accepts(self, ref: Any) -> bool:
        """Whether ``ref`` is a snapshot ref of this backend."""

    @abstractmethod
    async def _fork_state(self, ref: Any) -> S:
        """A new, independent state equal to the snapshot ``ref``."""

    @abstractmethod
    async def _promote(self, state: S, live: S) -> S:
        """Make a sandbox's ``state`` live in place of ``live`` (shielded); returns the live state from now on."""

    async def _drop(self, state: S) -> None:
        """Free a discarded sandbox's state (its lock is held: no call runs in it)."""
        return None

    def _effect_in(self, state: S, name: str) -> Effect:
        return self.effect(name)

    @abstractmethod
    def effect(self, name: str) -> Effect:
        """The effect class of tool ``name`` (unknown tools are MUTATING)."""

    def _stop(self, branch: Branch[S]) -> None:
        """Stop the call running in a sandbox being discarded (default: cancel it, which kills it)."""
        if branch.running is not None:
            branch.running.cancel()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._forget_sandboxes()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, *args: Any, **options: Any) -> Self:
        """A started backend (``cls(*args, **options)`` then :meth:`start`)."""
        backend = cls(*args, **options)
        await backend.start()
        return backend

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    def _set_live(self, state: S) -> None:
        """The live state from now on (start)."""
        self._head.state = state
        self._started = True

    def _forget_sandboxes(self) -> list[S]:
        """Mark every sandbox discarded, stop its call and forget it (close); returns their states."""
        boxes = list(self._sandboxes)
        self._sandboxes.clear()
        for box in boxes:
            box.discarded = True
            self._stop(box)
        self._started = False
        return [box.state for box in boxes]

    def _require_live(self) -> S:
        if not self._started:
            raise SnapshotError(f"{self.kind} backend is not started (or already closed)")
        return self._head.state

    def _owns(self, sandbox: Sandbox) -> bool:
        """Whether ``sandbox`` is one of this backend's (discarded or not)."""
        return isinstance(sandbox, Branch) and sandbox.calls is self

    def _own(self, sandbox: Sandbox) -> Branch[S]:
        if not self._owns(sandbox) or not isinstance(sandbox, Branch) or sandbox.discarded:
            raise SnapshotError("can only use a live sandbox of this backend")
        return sandbox

    # ------------------------------------------------------------------ the protocol

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run a call on the live state (a call that may write gives live a new token)."""
        self._require_live()
        return await self._head.execute(call, requestor)

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        """Freeze the live state, or a sandbox's current state (the snapshot's lineage ends with its token)."""
        branch = self._head if source is None else self._own(source)
        async with branch.lock:
            if source is None:
                self._require_live()
            else:
                self._own(branch)  # it may have been discarded while we waited
            ref = await self._freeze(branch.state)
            return Snapshot(ref=ref, lineage=(*branch.lineage, branch.token))

    async def fork(self, snapshot: Snapshot) -> Branch[S]:
        """A sandbox in the snapshot's state, continuing its lineage."""
        if not self._accepts(snapshot.ref):
            raise SnapshotError(f"snapshot does not belong to this {self.kind} backend")
        box = self._branch(await self._fork_state(snapshot.ref), snapshot.lineage, snapshot.token)
        self._sandboxes.add(box)
        return box

    async def commit(self, sandbox: Sandbox) -> None:
        """Make the sandbox's state live; :class:`StaleSnapshotError` unless it descends from live."""
        box = self._own(sandbox)
        head = self._head
        async with head.lock, box.lock:
            self._own(box)
            live = self._require_live()
            check_descends(box, head.token)
            with anyio.CancelScope(shield=True):  # a swap is never left half done
                head.state = await self._promote(box.state, live)
                head.token = box.token
                box.discarded = True  # its state now *is* live; the sandbox must not be used again
                self._sandboxes.discard(box)

    async def discard(self, sandbox: Sandbox) -> None:
        """Stop what runs in the sandbox and free its state; a no-op for anything not a live sandbox of ours."""
        if not self._owns(sandbox) or not isinstance(sandbox, Branch) or sandbox.discarded:
            return
        sandbox.discarded = True
        self._stop(sandbox)  # discard stops a running call for real
        with anyio.CancelScope(shield=True):
            async with sandbox.lock:
                self._sandboxes.discard(sandbox)
                await self._drop(sandbox.state)


class _EnvCalls(Calls[Environment]):
    """Calls on a Python-state environment: run in the process, on the branch's own environment object."""

    async def _run(self, state: Environment, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        return state.execute(call, requestor)

    def _effect_in(self, state: Environment, name: str) -> Effect:
        return state.effect(name)


_ENV_CALLS = _EnvCalls()


class InProcessSandbox(Branch[Environment]):
    """A sandbox holding its own copy of a Python-state environment."""

    prefix = "fork"

    def __init__(
        self, env: Environment, lineage: tuple[str, ...], token: str | None = None, calls: Calls[Environment] = _ENV_CALLS
    ) -> None:
        super().__init__(calls=calls, state=env, lineage=lineage, token=token or new_token())

    @property
    def env(self) -> Environment:
        """The sandbox's environment object (it becomes the live one on commit)."""
        return self.state


def _adopted(live: Environment, state: Environment) -> Environment:
    """``state`` made live: taken into ``live``'s own object where the environment can (a toolkit the user passed in
    stays the live state: :meth:`agentspec.env.ToolkitEnvironment.adopt`), else ``state`` itself."""
    adopt = getattr(live, "adopt", None)
    return adopt(state) if adopt is not None and type(state) is type(live) else state


class InProcessBackend(_EnvCalls, LineageBackend[Environment]):
    """The default backend for Python-state environments: forks are restored snapshots (copies).

    ``live`` is any :class:`agentspec.env.Environment`; a commit replaces it by
    the sandbox's environment object (or, for an environment with ``adopt``, moves the sandbox's state into the
    live object), so the swap is atomic.
    """

    kind = "in-process"

    def __init__(self, live: Environment) -> None:
        super().__init__()
        self._set_live(live)

    live: Environment = _head_field("state", "The live environment object.")  # type: ignore[assignment]

    def _branch(self, state: Environment, lineage: tuple[str, ...], token: str) -> InProcessSandbox:
        return InProcessSandbox(state, lineage, token)

    def _owns(self, sandbox: Sandbox) -> bool:
        # Any in-process sandbox will do: it needs nothing of the backend that made it.
        return isinstance(sandbox, InProcessSandbox)

    async def close(self) -> None:
        return None  # nothing to free; the live environment stays readable and usable

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.live.tool_specs(requestor)

    def effect(self, name: str) -> Effect:
        return self.live.effect(name)

    async def _freeze(self, state: Environment) -> StateSnapshot:
        return state.snapshot()

    def _accepts(self, ref: Any) -> bool:
        return isinstance(ref, StateSnapshot)

    async def _fork_state(self, ref: StateSnapshot) -> Environment:
        return self.live.restore(ref)

    async def _promote(self, state: Environment, live: Environment) -> Environment:
        return _adopted(live, state)

    def checkpoint(self) -> dict[str, Any] | None:
        return encode_checkpoint(self.live)

    def restore_checkpoint(self, data: dict[str, Any]) -> None:
        self.live = _adopted(self.live, decode_checkpoint(self.live, data))
        self.live_token = new_token()
