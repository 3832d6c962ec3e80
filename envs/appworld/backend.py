"""The agentspec side of an AppWorld task: a snapshot backend whose states live in the worker process.

:class:`AppWorldBackend` starts ``worker.py`` in the AppWorld venv (``anyio.open_process``) and keeps the
:class:`~agentspec.snapshot.LineageBackend` bookkeeping here; a state is the id of a branch in the worker
(``"live"`` or ``"branch-N"``), a snapshot ref the id of a frozen state there.  So::

    async with AppWorldBackend(python, root, "agspecnote_1", tools) as live:
        box = await live.fork(await live.snapshot())
        await box.execute(ToolCall(name="simple_note__login", arguments={...}))   # the worker's fork only
        await live.commit(box)                                                      # now live
        report = await live.evaluate()                                              # AppWorld's own tests

A call is turned into the code AppWorld executes by the tool table (:class:`ToolCode`); unknown tools are
answered with an error and count as mutating.
"""

from __future__ import annotations

import itertools
import json
import os
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from agentspec.errors import EnvError, SnapshotError
from agentspec.snapshot import LineageBackend
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

WORKER = Path(__file__).with_name("worker.py")
MAX_REPLY_BYTES = 256 * 1024 * 1024
FAILED = "Execution failed."
"""How AppWorld starts the output of code that raised."""


@dataclass(frozen=True)
class ToolCode:
    """One tool of an AppWorld backend: what the model sees, its effect, and the code a call becomes."""

    spec: ToolSpec
    code: Callable[[dict[str, Any]], str]
    """Arguments -> the Python AppWorld executes (ValueError: the arguments are wrong, shown to the agent)."""


class _SnapRef:
    """A snapshot of this backend: the worker's snapshot id (dropped there once no Python object holds it)."""

    def __init__(self, backend: AppWorldBackend, snapshot: str) -> None:
        self.backend = backend
        self.snapshot = snapshot
        weakref.finalize(self, backend._released.append, snapshot)


class AppWorldBackend(LineageBackend[str]):
    """One AppWorld task in its worker (see the module docstring)."""

    kind = "appworld"

    def __init__(self, python: str | Path, root: str | Path, task_id: str, tools: Mapping[str, ToolCode], *,
                 experiment: str = "agentspec", timeout_s: int = 100, log_path: str | Path | None = None) -> None:
        super().__init__()
        self.python = str(python)
        self.root = Path(root)
        self.task_id = task_id
        self.tools = dict(tools)
        self.experiment = experiment
        self.timeout_s = timeout_s
        self.log_path = Path(log_path) if log_path else self.root / "worker.log"
        self.instruction = ""
        self._process: Process | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._released: list[str] = []

    # --- the worker ------------------------------------------------------------------------

    async def start(self) -> None:
        env = {**os.environ, "APPWORLD_ROOT": str(self.root), "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # agentspec's packages must not leak into AppWorld's venv
        log = await anyio.to_thread.run_sync(self.log_path.open, "ab")  # the worker's stderr, kept by the child
        try:
            self._process = await anyio.open_process([self.python, str(WORKER)], env=env, stderr=log,
                                                     cwd=str(self.root))
        finally:
            log.close()
        assert self._process.stdout is not None
        self._reader = BufferedByteReceiveStream(self._process.stdout)
        try:
            await self._read_reply(None)
            opened = await self._request("open", task_id=self.task_id, experiment=self.experiment,
                                         timeout_s=self.timeout_s)
        except BaseException:
            # ``async with`` never reaches __aexit__ when start fails: the worker must not outlive it.
            with anyio.CancelScope(shield=True):
                process, self._process = self._process, None
                process.kill()
                await process.wait()
                await process.aclose()
            raise
        self.instruction = opened.get("instruction", "")
        self._set_live("live")

    async def close(self) -> None:
        self._forget_sandboxes()
        process, self._process = self._process, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(30):
                    await self._send(process, "close")
                    await process.wait()
            except (TimeoutError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                process.kill()
                await process.wait()
            await process.aclose()

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    async def _send(self, process: Process, op: str, ident: int | None = None, **fields: Any) -> None:
        assert process.stdin is not None
        await process.stdin.send((json.dumps({"id": ident, "op": op, **fields}) + "\n").encode())

    async def _read_reply(self, ident: int | None) -> dict[str, Any]:
        assert self._reader is not None
        while True:
            try:
                line = await self._reader.receive_until(b"\n", MAX_REPLY_BYTES)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                raise EnvError(f"the AppWorld worker exited: {self._log_tail()} (log: {self.log_path})") from None
            reply = json.loads(line)
            if reply.get("id") == ident:  # a reply to a request whose caller was cancelled is skipped
                return reply

    async def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request and its reply (serialised: the worker answers one at a time)."""
        async with self._lock:
            if self._process is None:
                raise SnapshotError("the AppWorld worker is not running")
            ident = next(self._ids)
            if self._released and op != "close":
                released, self._released = self._released, []
                await self._send(self._process, "drop", -ident, snapshots=released)
                await self._read_reply(-ident)
            await self._send(self._process, op, ident, **fields)
            reply = await self._read_reply(ident)
        if not reply.get("ok"):
            raise EnvError(f"AppWorld worker {op} failed: {reply.get('error')}")
        return reply

    # --- the strategy -----------------------------------------------------------------------

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return [tool.spec for tool in self.tools.values()]

    def effect(self, name: str) -> Effect:
        tool = self.tools.get(name)
        return tool.spec.effect if tool is not None else Effect.MUTATING

    def _plan(self, call: ToolCall, requestor: Requestor) -> Any:
        tool = self.tools.get(call.name)
        if tool is None:
            return Observation(call_id=call.id, name=call.name, content=f"Error: unknown tool {call.name!r}",
                               error=True, requestor=requestor)
        try:
            return tool.code(dict(call.arguments))
        except ValueError as exc:
            return Observation(call_id=call.id, name=call.name, content=f"Error: {exc}", error=True,
                               requestor=requestor)

    async def _run(self, state: str, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        output = (await self._request("execute", branch=state, code=step))["output"]
        return Observation(call_id=call.id, name=call.name, content=output.rstrip("\n"),
                           error=output.startswith(FAILED), requestor=requestor)

    async def _freeze(self, state: str) -> _SnapRef:
        return _SnapRef(self, (await self._request("snapshot", branch=state))["snapshot"])

    def _accepts(self, ref: Any) -> bool:
        return isinstance(ref, _SnapRef) and ref.backend is self

    async def _fork_state(self, ref: _SnapRef) -> str:
        return (await self._request("fork", snapshot=ref.snapshot))["branch"]

    async def _promote(self, state: str, live: str) -> str:
        await self._request("commit", branch=state)
        return "live"

    async def _drop(self, state: str) -> None:
        if self._process is not None:
            await self._request("discard", branch=state)

    # --- evaluation ----------------------------------------------------------------------------

    async def evaluate(self) -> dict[str, Any]:
        """AppWorld's evaluation of the live state: ``success``, ``num_tests``, ``passes``, ``failures``, ..."""
        self._require_live()
        return (await self._request("evaluate"))["evaluation"]
