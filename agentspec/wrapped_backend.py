"""A snapshot backend seen through a wrapper: the same states and lineage, with calls it may take over.

Two things need to stand between the executor and a backend without being a backend of their own:

- :class:`WithTools` adds tools that keep no state (a file reader, a web search) to a sandbox backend: their
  calls are answered in this process on any branch, live or fork, and never touch a token; every other call,
  and every snapshot, fork and commit, is the inner backend's;
- :class:`agentspec.runtime.real_time.RealTimeBackend` lets an out-of-process backend run under the virtual
  clock: its work takes real time while the models' simulated latency stays virtual.

Both subclass :class:`BackendWrapper`, which forwards everything, hands out :class:`WrappedSandbox` objects
for the inner sandboxes (so ``commit``/``discard`` get the wrapper's own sandbox back and unwrap it), and
passes any other attribute through (``checkpoint`` where the inner backend has one, ``live_container``, a
backend's own async ``evaluate``...).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Awaitable, Collection
from typing import Any, TypeVar

import anyio.to_thread

from agentspec.snapshot import ResumeBy, Sandbox, Snapshot, SnapshotBackend, error_observation, resume_by
from agentspec.tools import Toolkit
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec
from agentspec.virtual_clock import RealTime

__all__ = ["STATELESS_TOOL_DEADLINE_S", "BackendWrapper", "WithTools", "WrappedSandbox"]

T = TypeVar("T")

#: Seconds a stateless tool's call may take before the agent gets an error observation instead.
STATELESS_TOOL_DEADLINE_S = 60.0


class WrappedSandbox:
    """An inner backend's sandbox, whose calls go through the wrapper that forked it."""

    def __init__(self, owner: BackendWrapper, inner: Sandbox) -> None:
        self.owner = owner
        self.inner = inner

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def lineage(self) -> tuple[str, ...]:
        return self.inner.lineage

    @property
    def token(self) -> str:
        return self.inner.token

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return await self.owner._execute(self.inner, call, requestor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class BackendWrapper:
    """Forwards the snapshot protocol to ``inner``; subclasses override :meth:`_execute` or :meth:`_forward`."""

    def __init__(self, inner: SnapshotBackend) -> None:
        self.inner = inner

    @property
    def live_token(self) -> str:
        return self.inner.live_token

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.inner.tool_specs(requestor)

    def effect(self, name: str) -> Effect:
        return self.inner.effect(name)

    @property
    def resume_by(self) -> ResumeBy:
        """How the inner backend's live state comes back on resume."""
        return resume_by(self.inner)

    async def _forward(self, work: Awaitable[T]) -> T:
        """Await one piece of the inner backend's work (the hook for wrappers that change how it is awaited)."""
        return await work

    async def _execute(self, target: SnapshotBackend | Sandbox, call: ToolCall, requestor: Requestor) -> Observation:
        """Run ``call`` on ``target`` (the inner backend's live state or one of its sandboxes)."""
        return await self._forward(target.execute(call, requestor))

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return await self._execute(self.inner, call, requestor)

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        return await self._forward(self.inner.snapshot(self._unwrap(source) if source is not None else None))

    async def fork(self, snapshot: Snapshot) -> WrappedSandbox:
        return WrappedSandbox(self, await self._forward(self.inner.fork(snapshot)))

    async def commit(self, sandbox: Sandbox) -> None:
        await self._forward(self.inner.commit(self._unwrap(sandbox)))

    async def discard(self, sandbox: Sandbox) -> None:
        await self._forward(self.inner.discard(self._unwrap(sandbox)))

    async def close(self) -> None:
        await self._forward(self.inner.close())

    def _unwrap(self, sandbox: Sandbox) -> Sandbox:
        # Another wrapper's sandbox (or a bare one) goes through unchanged: the inner backend refuses it.
        return sandbox.inner if isinstance(sandbox, WrappedSandbox) and sandbox.owner is self else sandbox

    def __getattr__(self, name: str) -> Any:
        """Any other attribute of the inner backend; its own async methods (``evaluate``...) are awaited through
        :meth:`_forward` like the protocol's, so a wrapper's rule (real time on the virtual clock) holds for them."""
        if name == "inner":  # not set yet (during unpickling or a failed __init__): no recursion
            raise AttributeError(name)
        attribute = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        async def forwarded(*args: Any, **kwargs: Any) -> Any:
            return await self._forward(attribute(*args, **kwargs))

        return forwarded


class WithTools(BackendWrapper):
    """A sandbox backend plus a :class:`~agentspec.tools.Toolkit` of tools that keep no state.

    The toolkit's calls run in this process (in a worker thread: they may read files or the network) whichever
    branch they are made on, and give no branch a new token; only the inner backend's tools named in ``expose``
    (all of them when None) are offered and run, so a sandbox that has more tools than an agent should see
    (a workspace's shell) keeps them to itself.

    A toolkit call that takes longer than ``deadline_s`` seconds is answered with an error observation saying
    so, and the episode goes on; the worker thread cannot be killed, so the tools bound their own work too (the
    GAIA readers and fetches stop at their own deadlines, which are shorter).
    """

    def __init__(self, inner: SnapshotBackend, tools: Toolkit, *, expose: Collection[str] | None = None,
                 deadline_s: float | None = STATELESS_TOOL_DEADLINE_S) -> None:
        super().__init__(inner)
        self.tools = tools
        self.expose = None if expose is None else frozenset(expose)
        self.deadline_s = deadline_s

    def _offered(self, name: str) -> bool:
        return self.expose is None or name in self.expose

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        inner = [spec for spec in self.inner.tool_specs(requestor) if self._offered(spec.name)]
        return [*self.tools.specs(), *inner]

    def effect(self, name: str) -> Effect:
        if self.tools.has_tool(name):
            return self.tools.effect(name)
        return self.inner.effect(name) if self._offered(name) else Effect.MUTATING

    async def _execute(self, target: SnapshotBackend | Sandbox, call: ToolCall, requestor: Requestor) -> Observation:
        if self.tools.has_tool(call.name):
            return await self._run_stateless(call, requestor)
        if not self._offered(call.name):
            offered = sorted({spec.name for spec in self.tool_specs(requestor)})
            return error_observation(call, requestor, f"unknown tool {call.name!r}; the tools are: {', '.join(offered)}")
        return await super()._execute(target, call, requestor)

    async def _run_stateless(self, call: ToolCall, requestor: Requestor) -> Observation:
        """Run a toolkit call in a worker thread; past the deadline, stop waiting and say so."""
        # On the virtual clock a thread's work takes real time (else the clock would jump to the deadline at once).
        guard = RealTime.of_current_clock()
        with guard.running() if guard is not None else contextlib.nullcontext():
            with anyio.move_on_after(self.deadline_s if self.deadline_s is not None else math.inf):
                # abandon_on_cancel: a thread cannot be interrupted, so at the deadline it is left to finish alone.
                return await anyio.to_thread.run_sync(self.tools.run, call, requestor, abandon_on_cancel=True)
        return error_observation(
            call, requestor, f"the tool {call.name!r} took longer than {self.deadline_s:g}s and was stopped"
        )
