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

Every branch lives in the one worker process, so this backend is only for code agentspec writes (the API tools):
code actions run the agent's own Python, which can reach the worker itself, so they run one jailed worker per
branch instead (:class:`envs.appworld.isolated.IsolatedAppWorldBackend`).  Both talk to a worker through
:class:`WorkerPipe`, which bounds every reply line (``max_reply_bytes``): a worker that sends a longer one, or a
line that is not a reply, is killed and the caller gets one :class:`~agentspec.errors.EnvError` (the pipe is never
read out of step).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import weakref
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from agentspec.errors import AgentSpecError, EnvError, SnapshotError
from agentspec.snapshot import LineageBackend
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

WORKER = Path(__file__).with_name("worker.py")
MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The longest reply line read from a worker (an ``execute`` output is cut at 1M characters by the worker)."""
FAILED = "Execution failed."
"""How AppWorld starts the output of code that raised."""


@dataclass(frozen=True)
class ToolCode:
    """One tool of an AppWorld backend: what the model sees, its effect, and the code a call becomes."""

    spec: ToolSpec
    code: Callable[[dict[str, Any]], str]
    """Arguments -> the Python AppWorld executes (ValueError: the arguments are wrong, shown to the agent)."""


S = TypeVar("S")


class WorkerPipe:
    """One worker process and its JSON-lines pipe: requests serialised, every reply line bounded.

    ``error`` is the error class its failures raise (:class:`EnvError` for a worker holding live state,
    :class:`SnapshotError` for a sandbox's, so that a speculation's broken worker only drops that speculation).
    A reply line longer than ``max_reply_bytes``, or one that is not a JSON object, kills the worker: after
    that every request raises, and the pipe is never read from the middle of a line.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path,
                 max_reply_bytes: int = MAX_REPLY_BYTES, error: type[AgentSpecError] = EnvError) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.max_reply_bytes = max_reply_bytes
        self.error = error
        self.process: Process | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._opening: int | None = None
        self.opened: dict[str, Any] = {}
        """The reply to ``open`` (the task's ``instruction``), once read."""

    async def start(self, **open_fields: Any) -> None:
        """Start the worker and send it ``open`` (the reply is read by the first request, or :meth:`open`):
        a worker may load its task while the caller does something else."""
        log = await anyio.to_thread.run_sync(self.log_path.open, "ab")  # the worker's stderr, kept by the child
        try:
            self.process = await anyio.open_process(self.argv, env=self.env, stderr=log, cwd=str(self.cwd),
                                                    start_new_session=True)
        finally:
            log.close()
        assert self.process.stdout is not None
        self._reader = BufferedByteReceiveStream(self.process.stdout)
        self._opening = next(self._ids)
        await self._send("open", self._opening, **open_fields)

    async def open(self) -> dict[str, Any]:
        """The reply to ``open`` (waits for the worker to have loaded its task)."""
        async with self._lock:
            await self._await_open()
        return self.opened

    async def _await_open(self) -> None:
        if self._opening is None:
            return
        reply = await self._read_reply(self._opening)
        self._opening = None
        if not reply.get("ok"):
            raise self.error(f"AppWorld worker open failed: {reply.get('error')}")
        self.opened = reply

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request and its reply; ``self.error`` when the worker fails it or is gone."""
        async with self._lock:
            await self._await_open()
            ident = next(self._ids)
            await self._send(op, ident, **fields)
            reply = await self._read_reply(ident)
        if not reply.get("ok"):
            raise self.error(f"AppWorld worker {op} failed: {reply.get('error')}")
        return reply

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][-500:] if lines else ""

    async def _send(self, op: str, ident: int | None, **fields: Any) -> None:
        if self.process is None or self.process.stdin is None:
            raise self.error("the AppWorld worker is not running")
        try:
            await self.process.stdin.send((json.dumps({"id": ident, "op": op, **fields}) + "\n").encode())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise self.error(f"the AppWorld worker exited: {self.log_tail()} (log: {self.log_path})") from None

    async def _read_reply(self, ident: int | None) -> dict[str, Any]:
        if self._reader is None or self.process is None:
            raise self.error("the AppWorld worker is not running")
        while True:
            try:
                line = await self._reader.receive_until(b"\n", self.max_reply_bytes)
            except anyio.DelimiterNotFound:
                await self.kill()
                raise self.error(f"the AppWorld worker sent a reply line over {self.max_reply_bytes} bytes; it was "
                                 "stopped and its state is lost") from None
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self.kill()
                raise self.error(f"the AppWorld worker exited: {self.log_tail()} (log: {self.log_path})") from None
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if not isinstance(reply, dict):
                await self.kill()
                raise self.error("the AppWorld worker sent a line that is not a reply; it was stopped and its "
                                 "state is lost")
            if reply.get("id") == ident:  # a reply to a request whose caller was cancelled is skipped
                return reply

    async def close(self, grace_s: float = 30) -> None:
        """Ask the worker to close (up to ``grace_s``), then kill what is left of it."""
        if self.process is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(grace_s):
                    await self._send("close", None)
                    await self.process.wait()
            except (TimeoutError, AgentSpecError):
                pass
            await self.kill()

    async def kill(self) -> None:
        """Kill the worker with its process group (it leads its own session).  A jailed worker's jail ends with
        it: bubblewrap's PID namespace, and every process the agent's code started there, dies with its init."""
        process, self.process, self._reader = self.process, None, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.returncode is None:  # not reaped yet, so its pid (and group id) are still its own
                # Its children first, so that it reaps them (bubblewrap's namespace init would otherwise be left
                # to pid 1, which not every container reaps), then its whole group.
                children = _children(process.pid)
                for child in children:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(child, signal.SIGKILL)
                if children:
                    with anyio.move_on_after(2):
                        await process.wait()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            await process.aclose()


def _children(pid: int) -> list[int]:
    """The pids of a process's children (none when /proc cannot say)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def worker_env(root: Path) -> dict[str, str]:
    """The environment of an unjailed worker: the caller's, with AppWorld's root, minus agentspec's path."""
    env = {**os.environ, "APPWORLD_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # agentspec's packages must not leak into AppWorld's venv
    return env


def reply_output(reply: Mapping[str, Any], error: type[AgentSpecError]) -> str:
    """The ``output`` of an ``execute`` reply (``error`` when the worker sent something else)."""
    output = reply.get("output")
    if not isinstance(output, str):
        raise error("the AppWorld worker answered execute without a text output")
    return output


class AppWorldTools(LineageBackend[S]):
    """What every AppWorld backend shares: the tool table, calls as code, the worker's output as observations."""

    resume_by = "replay"
    """A resumed run runs the committed steps again on a fresh one (:data:`agentspec.snapshot.ResumeBy`): the live
    state is made afresh for every episode and answers deterministically."""

    kind = "appworld"

    def __init__(self, tools: Mapping[str, ToolCode]) -> None:
        super().__init__()
        self.tools = dict(tools)
        self.instruction = ""

    @abstractmethod
    async def _execute_code(self, state: S, code: str) -> str:
        """The output of ``code`` run on ``state``."""

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

    async def _run(self, state: S, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        output = await self._execute_code(state, step)
        return Observation(call_id=call.id, name=call.name, content=output.rstrip("\n"),
                           error=output.startswith(FAILED), requestor=requestor)


class _SnapRef:
    """A snapshot of this backend: the worker's snapshot id (dropped there once no Python object holds it)."""

    def __init__(self, backend: AppWorldBackend, snapshot: str) -> None:
        self.backend = backend
        self.snapshot = snapshot
        weakref.finalize(self, backend._released.append, snapshot)


class AppWorldBackend(AppWorldTools[str]):
    """One AppWorld task in its worker, every branch in that one process (see the module docstring)."""

    def __init__(self, python: str | Path, root: str | Path, task_id: str, tools: Mapping[str, ToolCode], *,
                 experiment: str = "agentspec", timeout_s: int = 100, log_path: str | Path | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        super().__init__(tools)
        self.python = str(python)
        self.root = Path(root)
        self.task_id = task_id
        self.experiment = experiment
        self.timeout_s = timeout_s
        self.log_path = Path(log_path) if log_path else self.root / "worker.log"
        self.max_reply_bytes = max_reply_bytes
        self._worker: WorkerPipe | None = None
        self._lock = anyio.Lock()
        self._released: list[str] = []

    # --- the worker ------------------------------------------------------------------------

    async def start(self) -> None:
        worker = WorkerPipe([self.python, str(WORKER)], env=worker_env(self.root), cwd=self.root,
                            log_path=self.log_path, max_reply_bytes=self.max_reply_bytes)
        try:
            await worker.start(task_id=self.task_id, experiment=self.experiment, timeout_s=self.timeout_s)
            opened = await worker.open()
        except BaseException:
            # ``async with`` never reaches __aexit__ when start fails: the worker must not outlive it.
            await worker.kill()
            raise
        self._worker = worker
        self.instruction = opened.get("instruction", "")
        self._set_live("live")

    async def close(self) -> None:
        self._forget_sandboxes()
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.close()

    async def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request and its reply (serialised: the worker answers one at a time)."""
        async with self._lock:
            if self._worker is None or self._worker.process is None:
                raise SnapshotError("the AppWorld worker is not running")
            if self._released and op != "close":
                released, self._released = self._released, []
                await self._worker.request("drop", snapshots=released)
            return await self._worker.request(op, **fields)

    # --- the strategy -----------------------------------------------------------------------

    async def _execute_code(self, state: str, code: str) -> str:
        return reply_output(await self._request("execute", branch=state, code=code), EnvError)

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
        if self._worker is not None and self._worker.process is not None:
            await self._request("discard", branch=state)

    # --- evaluation ----------------------------------------------------------------------------

    async def evaluate(self) -> dict[str, Any]:
        """AppWorld's evaluation of the live state: ``success``, ``num_tests``, ``passes``, ``failures``, ...,
        and ``end_state``, the task output it read (:func:`envs.appworld.worker.end_state`)."""
        self._require_live()
        return (await self._request("evaluate"))["evaluation"]
