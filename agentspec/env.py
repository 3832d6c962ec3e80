"""The environment seam: what the executor, the evaluator and the benches need from an environment.

An environment executes tool calls for a requestor and can be snapshotted.
Snapshots are frozen values (serialised state plus a content hash) and never
share mutable state with the environment they came from: restoring builds a
new environment instead of patching one in place.

:class:`ToolkitEnvironment` makes a :class:`~agentspec.tools.Toolkit` instance an
environment, for any bench whose tools are a toolkit run in this process (GAIA's
reading tools) and for the Python API's toolkits.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, Self, runtime_checkable

from agentspec.errors import ConfigError, SnapshotError
from agentspec.tools import Toolkit
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec


@dataclass(frozen=True)
class StateSnapshot:
    """An immutable copy of an environment's state.

    ``digest`` identifies the *content*: snapshots of equal states have equal
    digests.  Pickle bytes are not canonical (memo order can change after a
    round trip), so an environment may pass ``canonical``, a function giving a
    canonical text of the state; the digest is computed on first use only, to
    keep taking a snapshot cheap.
    """

    data: bytes
    canonical: Callable[[Any], str] | None = field(default=None, compare=False, repr=False)
    copy: Any = field(default=None, compare=False, repr=False)
    """For state that cannot be pickled (classes defined at run time...): a private deep copy."""

    @classmethod
    def of(cls, state: Any, canonical: Callable[[Any], str] | None = None) -> StateSnapshot:
        """Freeze ``state``: pickled when it can be, deep-copied otherwise."""
        try:
            data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            try:
                return cls(data=b"", canonical=canonical, copy=copy.deepcopy(state))
            except Exception as exc:  # noqa: BLE001 - whatever deepcopy trips on, say why
                raise SnapshotError(f"state can be neither pickled nor copied: {exc}") from exc
        return cls(data=data, canonical=canonical)

    @cached_property
    def digest(self) -> str:
        if self.canonical is not None:
            basis = self.canonical(self.load()).encode()
        else:
            basis = self.data if self.copy is None else repr(self.copy).encode()
        return hashlib.sha256(basis).hexdigest()

    def load(self) -> Any:
        """A fresh, independent copy of the state."""
        return pickle.loads(self.data) if self.copy is None else copy.deepcopy(self.copy)


@runtime_checkable
class Environment(Protocol):
    """What agentspec needs from an environment an agent acts in."""

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        """The tools this requestor may call."""
        ...

    def effect(self, name: str) -> Effect:
        """The effect class of a tool (unknown tools are MUTATING)."""
        ...

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run one call; tool failures come back as error observations, never as exceptions."""
        ...

    def snapshot(self) -> StateSnapshot:
        """An independent, immutable copy of the current state."""
        ...

    def restore(self, snapshot: StateSnapshot) -> Self:
        """A new environment in the snapshot's state (this one is left untouched)."""
        ...


class ToolkitEnvironment:
    """A :class:`~agentspec.tools.Toolkit` instance as an environment: its whole object is the state, copied by
    every snapshot.

    ``shared``: the toolkit's tools only read (a question's files, a search index), so there is no state to copy
    and every fork shares the one toolkit; a tool it does not have is ``external`` then (never run in a fork, as
    nothing would isolate it).  A shared toolkit with a tool that is not read-only is a ConfigError.
    """

    def __init__(self, toolkit: Toolkit, *, shared: bool = False) -> None:
        if shared:
            writers = [spec.name for spec in toolkit.specs() if spec.effect is not Effect.READ_ONLY]
            if writers:
                raise ConfigError(f"a shared toolkit's tools must only read; these do not: {', '.join(writers)}")
        self.toolkit = toolkit
        self.shared = shared

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.toolkit.specs()

    def effect(self, name: str) -> Effect:
        if self.toolkit.has_tool(name):
            return self.toolkit.effect(name)
        return Effect.EXTERNAL if self.shared else Effect.MUTATING

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return self.toolkit.run(call, requestor)

    def snapshot(self) -> StateSnapshot:
        return StateSnapshot(data=b"") if self.shared else StateSnapshot.of(self.toolkit)

    def restore(self, snapshot: StateSnapshot) -> Self:
        return self if self.shared else type(self)(snapshot.load())

    def adopt(self, other: Self) -> Self:
        """Make ``other``'s state this environment's, inside the toolkit object this one holds: the object a user
        passed in stays the live state after a commit (they may keep reading it).  Returns the environment that is
        live from now on: this one, or ``other`` where the toolkit has no ``__dict__`` to take over."""
        if other.toolkit is self.toolkit:
            return self
        if not hasattr(self.toolkit, "__dict__") or type(other.toolkit) is not type(self.toolkit):
            return other
        vars(self.toolkit).clear()
        vars(self.toolkit).update(vars(other.toolkit))  # the committed fork is never used again: no copy needed
        return self
