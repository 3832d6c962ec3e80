"""MCP servers as agentspec environments, on the official ``mcp`` SDK (``pip install 'agentspec[mcp]'``).

A server's tools become the agent's tools; its annotations decide what may run speculatively, failing closed::

    async with MCPToolkit.stdio("python", "tests/servers/notes_server.py", "notes") as tools:
        result = await Executor(tools, authority=..., speculator=..., mode="sa").run("Write down 'milk'")

    MCPToolkit.http("http://127.0.0.1:8000/mcp")           # a streamable HTTP server
    MCPToolkit.stdio("python", "server.py", sandbox="overlay")   # one copy of the server per fork (see below)
    MCPToolkit.stdio("python", "server.py", sandbox="docker")    # ... each in its fork's container

**Effects.**  The MCP specification's defaults are ``readOnlyHint=false``, ``destructiveHint=true``,
``openWorldHint=true``, so a tool without annotations may change anything anywhere.  agentspec cannot fork the
state of a server it merely talks to, so only ``readOnlyHint: true`` tools are ever run speculatively (in a
fork, against the one live server); every other tool is ``external`` and runs only once the authority has
decided it (:meth:`agentspec.types.ToolSpec.from_mcp`).

**Failures.**  Every call has a deadline (``call_timeout_s``).  A server that hangs, exits in the middle of a
call, or answers with something that is not a valid tool result gives the agent one error observation saying
which, never a hang or a traceback; the server is stopped and started again for the next call (a stdio server is
a new process; its state is whatever it keeps outside itself).  Nothing committed is lost: the executor's
history holds every committed step, and a call that failed commits as that error.  A server that cannot be
started at all is an :class:`~agentspec.errors.EnvError` naming the command and what it wrote.

**A server inside a sandbox** (``sandbox="overlay"`` or ``"copy"``, CLI ``--mcp-sandbox overlay``): the stdio
server runs under bubblewrap (:mod:`agentspec.sandbox.overlay`'s jail: no network, nothing writable but its tree
and a private ``/tmp``) with its working directory the sandbox's tree.  Each fork gets its own copy of the server
over its own forked tree, so the server's state-changing tools (unannotated ones included) run speculatively in
forks and are committed or dropped with the tree, like any sandbox tool.  This suits only servers whose whole
state is files under their working directory, re-read on every call (a notes or file-system server, a SQLite file
there): a server is stopped and restarted whenever its tree is frozen, promoted or dropped, so anything it keeps
in memory, or anywhere else, is lost or, worse, shared across forks.  The jail sees ``/usr``, the Python that runs
agentspec (its prefix and base prefix, read-only) and the folder agentspec runs in (read-only): a command
``python`` (or ``python3``) is that Python, and arguments naming files of that folder by relative path are made
absolute.

``sandbox="docker"`` (CLI ``--mcp-sandbox docker``) runs each copy of the server in its branch's container of the
Docker sandbox instead (:class:`MCPDockerToolkit`, :mod:`agentspec.mcp_docker`): the same one-server-per-state bookkeeping, a container's
confinement and limits, and a derived image that carries the MCP SDK and the server's file in (containers have no
network).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import anyio
import anyio.abc
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.errors import ConfigError, EnvError
from agentspec.snapshot import LineageBackend, error_observation
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

__all__ = [
    "SANDBOX_KINDS", "MCPBackend", "MCPDockerToolkit", "MCPServer", "MCPSandboxToolkit", "MCPToolkit", "SandboxKind",
    "sandboxed_toolkit",
]

SandboxKind = Literal["overlay", "copy", "docker"]
SANDBOX_KINDS: tuple[SandboxKind, ...] = ("overlay", "copy", "docker")
MCPBackend: TypeAlias = "MCPToolkit | MCPSandboxToolkit | MCPDockerToolkit"
"""Any of the MCP toolkits (a snapshot backend with the server's tools)."""

#: How long a server may take to start and list its tools.
CONNECT_TIMEOUT_S = 30.0
#: How long one tool call may take before the agent is told the server hung.
CALL_TIMEOUT_S = 60.0
#: How much of a result the agent sees (a runaway server must not flood the context).
MAX_RESULT_CHARS = 50_000


def _sdk() -> Any:
    """The ``mcp`` package, or a ConfigError saying how to install it."""
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ConfigError("MCP servers need the MCP SDK: pip install 'agentspec[mcp]'") from exc
    return mcp


class MCPServer(BaseModel):
    """Where an MCP server is: a command to start (stdio) or a URL (streamable HTTP), and its deadlines."""

    model_config = ConfigDict(frozen=True)

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    """Variables added to the SDK's safe default environment (PATH, HOME, ...)."""
    cwd: str | None = None
    url: str | None = None
    call_timeout_s: float = Field(CALL_TIMEOUT_S, gt=0)
    connect_timeout_s: float = Field(CONNECT_TIMEOUT_S, gt=0)

    @classmethod
    def of_command_line(cls, line: str, **options: Any) -> MCPServer:
        """A stdio server from one shell-quoted line, as ``--mcp "python server.py ROOT"`` gives it."""
        words = shlex.split(line)
        if not words:
            raise ConfigError("--mcp: give the command that starts the server, e.g. --mcp 'python server.py'")
        return cls(command=words[0], args=tuple(words[1:]), **options)

    def model_post_init(self, context: Any) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError("an MCP server is a command (stdio) or a URL (streamable HTTP), exactly one of them")

    @property
    def label(self) -> str:
        """The server as messages name it."""
        return self.url or shlex.join([self.command or "", *self.args])

    def executable(self) -> str:
        """The command to run: ``python``/``python3`` is the interpreter running agentspec (it has the SDK)."""
        assert self.command is not None
        return sys.executable if self.command in ("python", "python3") else self.command


# --------------------------------------------------------------------------- one running session


class _CallFailed(Exception):
    """A call that produced no usable result; ``broken``: the session cannot be trusted for the next one."""

    def __init__(self, message: str, *, broken: bool) -> None:
        super().__init__(message)
        self.broken = broken


Transport = Callable[[], AbstractAsyncContextManager[Any]]


class _Session:
    """One MCP client session, run by a task of its own.

    The SDK's transports and sessions are context managers holding task groups, so they must be entered and left
    by one task; calls come from many (the live branch, every fork).  The owner task holds the session open until
    :meth:`stop`, and catches whatever ends it, so a dying server never tears down the caller's task group.
    """

    def __init__(self, transport: Transport, server: MCPServer, label: str) -> None:
        self.transport = transport
        self.server = server
        self.label = label
        self.session: Any = None
        self.tools: list[dict[str, Any]] = []
        self._stop = anyio.Event()
        self.done = anyio.Event()
        self.failure: str | None = None

    async def open(self, group: anyio.abc.TaskGroup) -> None:
        """Start the session in ``group`` and list the tools; EnvError when the server does not come up."""
        try:
            await group.start(self._own)
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised, say it once, plainly
            raise EnvError(f"the MCP server {self.label} did not start: {_describe(exc)}") from exc
        if self.failure is not None:
            raise EnvError(f"the MCP server {self.label} did not start: {self.failure}")

    async def _own(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        mcp = _sdk()
        started = False
        try:
            # One scope around the whole session (the transport's task group must nest inside it); its deadline
            # bounds only the start and is lifted once the tools are listed.
            with anyio.CancelScope(deadline=anyio.current_time() + self.server.connect_timeout_s) as scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self.transport())
                    session = await stack.enter_async_context(mcp.ClientSession(read, write))
                    await session.initialize()
                    self.tools = await _list_tools(session)
                    scope.deadline = math.inf
                    self.session = session
                    started = True
                    task_status.started()
                    await self._stop.wait()
            if scope.cancelled_caught and not started:
                self.failure = f"no answer within {self.server.connect_timeout_s:g}s"
        except Exception as exc:  # noqa: BLE001 - the server's end is reported to callers, never raised here
            self.failure = _describe(exc)
        finally:
            self.session = None
            self.done.set()
            if not started:
                task_status.started()

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(text the agent sees, whether the tool reported an error); :class:`_CallFailed` without a result."""
        session = self.session
        if session is None:
            raise _CallFailed(f"the MCP server {self.label} is not running ({self.failure or 'stopped'})", broken=True)
        limit = self.server.call_timeout_s
        mcp = _sdk()
        try:
            with anyio.fail_after(limit):
                result = await session.call_tool(name, arguments, read_timeout_seconds=limit)
        except TimeoutError as exc:
            raise _CallFailed(f"the MCP server {self.label} gave no answer to {name!r} within {limit:g}s; it was "
                              "stopped and will be started again for the next call", broken=True) from exc
        except mcp.MCPError as exc:
            # Connection closed: the server exited under the call.  Any other code is the server refusing the call
            # (unknown tool, bad arguments): the session itself is fine.
            closed = exc.code == _connection_closed()
            if closed or self.done.is_set():
                raise _CallFailed(f"the MCP server {self.label} exited during the call to {name!r}; it will be "
                                  "started again for the next call", broken=True) from exc
            if exc.code == _request_timeout():
                raise _CallFailed(f"the MCP server {self.label} gave no answer to {name!r} within {limit:g}s; it "
                                  "was stopped and will be started again for the next call", broken=True) from exc
            raise _CallFailed(f"the MCP server refused the call to {name!r}: {exc.error.message}", broken=False) from exc
        except (ValidationError, RuntimeError, ValueError, TypeError) as exc:
            # The SDK validates every result (schema, declared output schema): the answer is not a tool result.
            raise _CallFailed(f"the MCP server {self.label} answered {name!r} with a malformed result "
                              f"({_first_line(exc)})", broken=False) from exc
        if not isinstance(result, mcp.types.CallToolResult):
            raise _CallFailed(f"the MCP server {self.label} answered {name!r} with a {type(result).__name__}, not a "
                              "tool result", broken=False)
        return _render(result), bool(result.is_error)

    def stop(self) -> None:
        """Ask the owner task to close the session (the SDK stops a stdio server's process); returns at once."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether it was asked to stop (its server may still be shutting down: see :attr:`done`)."""
        return self._stop.is_set()

    async def ended(self, within_s: float = 10.0) -> None:
        """Wait (``within_s`` at most) until the owner task has closed the session and its server is gone."""
        with anyio.move_on_after(within_s):
            await self.done.wait()


def _connection_closed() -> int:
    from mcp.types import CONNECTION_CLOSED

    return int(CONNECTION_CLOSED)


def _request_timeout() -> int:
    from mcp.types import REQUEST_TIMEOUT

    return int(REQUEST_TIMEOUT)


async def _list_tools(session: Any) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages), as the wire's camelCase JSON."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    mcp = _sdk()
    while True:
        params = mcp.types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools += [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups (the SDK's task groups wrap what they raise)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, EnvError):  # already ours, already worded
        return _first_line(exc)
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _render(result: Any) -> str:
    """A tool result as the text an agent sees: its text blocks, a line for each other block, or its structure."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource":
            inner = block.resource
            parts.append(getattr(inner, "text", None) or f"[resource {inner.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "\n[... cut]"


# --------------------------------------------------------------------------- a server agentspec cannot fork


class _SessionGroup:
    """The task group the sessions' owner tasks run in, entered by start and left by close (one task does both).

    Left directly, never from inside a new cancel scope (``LineageBackend.__aexit__`` shields ``close``, so the
    toolkits leave it first): the group's own scope is shielded instead, so an outer cancellation cannot stop
    the servers' shutdown half way.
    """

    group: anyio.abc.TaskGroup | None = None

    async def _enter_group(self) -> anyio.abc.TaskGroup:
        if self.group is None:
            group = anyio.create_task_group()
            await group.__aenter__()
            self.group = group
        return self.group

    async def _leave_group(self, sessions: Sequence[_Session]) -> None:
        group, self.group = self.group, None
        for session in sessions:
            session.stop()
        if group is not None:
            group.cancel_scope.shield = True
            await group.__aexit__(None, None, None)


class _ServerTools:
    """The tools a server listed, as both toolkits offer them; a call to a tool it never listed is an error
    observation, and its effect is ``unlisted`` (fail closed)."""

    server: MCPServer
    _specs: dict[str, ToolSpec]
    unlisted: Effect = Effect.EXTERNAL

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        if not self._specs:
            raise EnvError(f"the MCP toolkit for {self.server.label} is not started: use `async with` (or start())")
        return list(self._specs.values())

    def effect(self, name: str) -> Effect:
        spec = self._specs.get(name)
        return spec.effect if spec is not None else self.unlisted

    def _plan(self, call: ToolCall, requestor: Requestor) -> Any:
        if call.name not in self._specs:
            return error_observation(call, requestor, f"unknown tool {call.name!r}; the tools are: "
                                     f"{', '.join(sorted(self._specs))}")
        return call


@dataclass(eq=False)
class _Link:
    """The live server connection every branch of an unforkable server shares (restarted after a failure)."""

    session: _Session | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class MCPToolkit(_ServerTools, _SessionGroup, LineageBackend[_Link]):
    """An MCP server as a snapshot backend: the server's tools, with their effects from its annotations.

    Its state is the server's, which agentspec cannot fork: forks share the one live connection and only
    ``readOnlyHint: true`` tools run in them; every other tool is ``external`` (see the module docstring).
    Open it as ``async with MCPToolkit.stdio(...) as tools:`` (or ``await toolkit.start()`` and
    ``await toolkit.close()`` in the same task): the connection lives in a task group of its own until then.
    """

    kind = "mcp"

    def __init__(self, server: MCPServer) -> None:
        super().__init__()
        self.server = server
        self._specs: dict[str, ToolSpec] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    def stdio(cls, command: str, *args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
              sandbox: SandboxKind | None = None, source: str | Path | None = None,
              call_timeout_s: float = CALL_TIMEOUT_S,
              **sandbox_options: Any) -> MCPToolkit | MCPSandboxToolkit | MCPDockerToolkit:
        """A server started as ``command *args`` and spoken to over its stdin/stdout.

        ``sandbox="overlay"`` (or ``"copy"``, or ``"docker"``) runs it inside a forkable sandbox instead, its
        working directory a tree first filled from ``source`` (:func:`sandboxed_toolkit`; ``cwd`` does not apply
        there).
        """
        server = MCPServer(command=command, args=tuple(args), env=dict(env or {}),
                           cwd=str(cwd) if cwd is not None else None, call_timeout_s=call_timeout_s)
        if sandbox is not None:
            return sandboxed_toolkit(server, sandbox, source, **sandbox_options)
        if source is not None or sandbox_options:
            raise ConfigError("source and sandbox options apply only to a server in a sandbox (sandbox='overlay')")
        return cls(server)

    @classmethod
    def http(cls, url: str, *, call_timeout_s: float = CALL_TIMEOUT_S) -> MCPToolkit:
        """A server at ``url``, spoken to over streamable HTTP."""
        return cls(MCPServer(url=url, call_timeout_s=call_timeout_s))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect to the server and read its tools; EnvError when it does not come up."""
        if self.group is not None:
            return
        await self._enter_group()
        link = _Link()
        try:
            await self._connect(link)
        except BaseException:
            await self._leave_group([])
            raise
        self._set_live(link)

    async def close(self) -> None:
        """Stop the server (a stdio server's process ends) and wait until it has."""
        link = self._head.state
        self._forget_sandboxes()
        await self._leave_group([link.session] if link is not None and link.session is not None else [])

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()  # not shielded by a scope of its own: see _SessionGroup

    async def _connect(self, link: _Link) -> _Session:
        if self.group is None:
            raise EnvError(f"the MCP toolkit for {self.server.label} is closed")
        session = _Session(lambda: _transport(self.server), self.server, self.server.label)
        await session.open(self.group)
        link.session = session
        self._specs = {tool["name"]: ToolSpec.from_mcp(tool) for tool in session.tools}
        return session

    async def _run(self, state: _Link, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        async with state.lock:  # one restart at a time; calls themselves run concurrently on the session
            session = state.session
            if session is None or session.done.is_set():
                try:
                    session = await self._connect(state)
                except EnvError as exc:
                    return error_observation(call, requestor, str(exc))
        return await _observe(session, call, requestor, lambda: _drop_session(state, session))

    def _deadline_s(self) -> float | None:
        # The session's own deadline answers first (and stops the server); this one only guards the restart.
        return self.server.call_timeout_s + self.server.connect_timeout_s + 5.0

    # ------------------------------------------------------------------ forks share the live connection

    async def _freeze(self, state: _Link) -> _Link:
        return state

    def _accepts(self, ref: Any) -> bool:
        return ref is self._head.state

    async def _fork_state(self, ref: _Link) -> _Link:
        return ref

    async def _promote(self, state: _Link, live: _Link) -> _Link:
        return live


def _drop_session(link: _Link, session: _Session) -> None:
    session.stop()
    if link.session is session:
        link.session = None


async def _observe(session: _Session, call: ToolCall, requestor: Requestor, on_broken: Callable[[], None]) -> Observation:
    """One call through ``session`` as an observation; a session that broke is dropped (``on_broken``)."""
    try:
        text, failed = await session.call(call.name, dict(call.arguments))
    except _CallFailed as exc:
        if exc.broken:
            on_broken()
        return error_observation(call, requestor, str(exc))
    if failed:
        return error_observation(call, requestor, text or "the tool failed")
    return Observation(call_id=call.id, name=call.name, content=text, requestor=requestor)


@asynccontextmanager
async def _transport(server: MCPServer, argv: Sequence[str] | None = None, cwd: str | None = None,
                     env: Mapping[str, str] | None = None) -> AsyncIterator[Any]:
    """The SDK's stdio or streamable HTTP transport for ``server`` (``argv``: run this instead of its command)."""
    mcp = _sdk()
    if server.url is not None:
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(server.url) as streams:
            yield streams[0], streams[1]
        return
    command, *args = argv or [server.executable(), *server.args]
    parameters = mcp.StdioServerParameters(command=command, args=list(args), env={**server.env, **(env or {})},
                                           cwd=cwd if cwd is not None else server.cwd)
    with tempfile.TemporaryFile("w+") as errlog:  # the server's stderr, quoted when it fails to start
        try:
            async with mcp.stdio_client(parameters, errlog=errlog) as (read, write):
                yield read, write
        except Exception as exc:
            errlog.seek(0)
            said = errlog.read().strip().splitlines()
            if said:
                raise EnvError(f"{_describe(exc)}; the server wrote: {said[-1][:300]}") from exc
            raise


# --------------------------------------------------------------------------- a server inside a sandbox


class _ServerPerTree(_ServerTools, _SessionGroup, ABC):
    """One copy of a stdio server per sandbox state (a tree, a container), for the sandboxed toolkits.

    Mixed in before a :class:`~agentspec.snapshot.LineageBackend` whose states carry ``dirty`` (set by a call that
    may write).  A state's server starts on its first call and is stopped, and waited for, before the state is
    frozen (only when a call may have written: a snapshot must not catch a write half done), promoted or dropped,
    so no server outlives or straddles its state.  A subclass says how a server over a state is reached
    (:meth:`_server_transport`).
    """

    kind = "mcp-sandbox"
    unlisted = Effect.MUTATING  # a tool it never listed runs only in a fork until committed, like any sandbox tool
    _servers: weakref.WeakKeyDictionary[Any, _Session]

    def _init_servers(self, server: MCPServer) -> None:
        if server.command is None:
            raise ConfigError("only a stdio server (a command) can run inside a sandbox, not a URL")
        self.server = server
        self._servers = weakref.WeakKeyDictionary()
        self._specs = {}

    @abstractmethod
    def _server_transport(self, state: Any) -> Transport:
        """How to start and reach the server over ``state`` (the SDK's read and write streams)."""

    async def start(self) -> None:
        """Start the sandbox, then the server over the live state, and read its tools."""
        if self.group is not None:
            return
        await self._enter_group()
        try:
            await super().start()  # type: ignore[misc]
            session = await self._server_for(self._require_live())  # type: ignore[attr-defined]
            self._specs = {tool["name"]: ToolSpec.from_mcp(tool, forkable=True) for tool in session.tools}
        except BaseException:
            await self._leave_group(list(self._servers.values()))
            with anyio.CancelScope(shield=True):
                await super().close()  # type: ignore[misc]
            raise

    async def close(self) -> None:
        """Stop every server, then remove the sandbox's states."""
        sessions = list(self._servers.values())
        self._servers.clear()
        await self._leave_group(sessions)
        with anyio.CancelScope(shield=True):
            await super().close()  # type: ignore[misc]

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()  # not shielded by a scope of its own: see _SessionGroup

    def _deadline_s(self) -> float | None:
        return self.server.call_timeout_s + self.server.connect_timeout_s + 5.0

    async def _run(self, state: Any, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        if self.effect(call.name) is not Effect.READ_ONLY:
            state.dirty = True  # set first: a call killed half way may still have written
        try:
            session = await self._server_for(state)
        except EnvError as exc:
            return self._label(error_observation(call, requestor, str(exc)))  # type: ignore[attr-defined]

        return await _observe(session, call, requestor, session.stop)  # replaced by the next call on the state

    async def _server_for(self, state: Any) -> _Session:
        """The server running over ``state``, started on first use (the caller holds the state's branch lock).

        A broken server is replaced only once it is gone: one server per state at a time (the Docker toolkit's
        shutdown of a server kills every process in its container)."""
        session = self._servers.get(state)
        if session is not None:
            if not session.done.is_set() and not session.stopping:
                return session
            await session.ended()
        if self.group is None:
            raise EnvError(f"the MCP sandbox for {self.server.label} is closed")
        session = _Session(self._server_transport(state), self.server, self.server.label)
        await session.open(self.group)
        self._servers[state] = session
        return session

    async def _stop_server(self, state: Any) -> None:
        """Stop the server over ``state`` and wait until it is gone (its state is about to move or go)."""
        session = self._servers.pop(state, None)
        if session is not None:
            session.stop()
            await session.ended()

    async def _freeze(self, state: Any) -> Any:
        if state.dirty:  # an unchanged state is not frozen again (its snapshot is reused): its server may stay
            await self._stop_server(state)
        return await super()._freeze(state)  # type: ignore[misc]

    async def _promote(self, state: Any, live: Any) -> Any:
        await self._stop_server(state)
        await self._stop_server(live)
        return await super()._promote(state, live)  # type: ignore[misc]

    async def _drop(self, state: Any) -> None:
        await self._stop_server(state)
        await super()._drop(state)  # type: ignore[misc]


def sandboxed_toolkit(server: MCPServer, kind: SandboxKind, source: str | Path | None = None,
                      **options: Any) -> MCPSandboxToolkit | MCPDockerToolkit:
    """A fresh, unopened toolkit running the stdio ``server`` inside a sandbox of ``kind``, one copy per fork.

    ``overlay``/``copy``: :class:`MCPSandboxToolkit` (bubblewrap on this host); ``docker``:
    :class:`agentspec.mcp_docker.MCPDockerToolkit` (a container per fork).  ``source`` fills the live tree;
    ``options`` go to the toolkit (the backend's options: ``limits``, ``image``...).
    """
    if kind not in SANDBOX_KINDS:
        raise ConfigError(f"an MCP server's sandbox is one of {', '.join(SANDBOX_KINDS)}, not {kind!r}")
    path = Path(source) if source is not None else None
    if kind == "docker":
        return MCPDockerToolkit(server, path, **options)
    return MCPSandboxToolkit(server, path, mode=kind, **options)


def _overlay_backend() -> type:
    from agentspec.sandbox.overlay import OverlayBackend

    return OverlayBackend


class MCPSandboxToolkit(_ServerPerTree, _overlay_backend()):  # type: ignore[misc]
    """A stdio MCP server inside an overlay (or copy) sandbox: one copy of the server per fork, over its tree.

    See the module docstring for which servers this suits (state only in files under their working directory).
    The server's state-changing tools are MUTATING (IDEMPOTENT with ``idempotentHint``): they run in forks and
    reach the live tree only by commit.  ``source``: the tree's initial files; the other options are
    :class:`~agentspec.sandbox.overlay.OverlayBackend`'s (``confinement="none"`` runs the servers unconfined).
    """

    def __init__(self, server: MCPServer, source: Path | None = None, *, mode: Literal["overlay", "copy"] = "overlay",
                 **options: Any) -> None:
        from agentspec.sandbox.program import RUNNER_FILE, SandboxProgram
        from agentspec.tools import Toolkit

        self._init_servers(server)
        # The jail is the overlay backend's; its program (the one-shot tool runner) is never run here.
        super().__init__(SandboxProgram(Toolkit(), RUNNER_FILE), source, mode=mode, **options)
        self._here = Path.cwd()

    @property
    def isolation(self) -> dict[str, object]:
        """The overlay backend's confinement and disk cap; the per-call memory and process limits of its one-shot
        runner do not apply to a server (one long-lived process per tree), so they read None."""
        return {**super().isolation, "memory_bytes": None, "pids": None, "servers": "one per tree"}

    def _server_transport(self, tree: Any) -> Transport:
        argv, cwd = self._argv(tree.view)
        return lambda: _transport(self.server, argv, cwd)

    def _argv(self, view: Path) -> tuple[list[str], str]:
        """The jailed command line for a server over ``view``, and the directory it starts in."""
        command = self.server.executable()
        resolved = shutil.which(command) or command
        args = [str((self._here / arg).resolve()) if not os.path.isabs(arg) and (self._here / arg).exists() else arg
                for arg in self.server.args]
        jail = self._require_jail()
        if jail.kind == "none":
            return [resolved, *args], str(view)
        from agentspec.sandbox._host import _bwrap_base
        from agentspec.sandbox.parent_guard import guarded

        reads = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), self._here.resolve()}
        binds = [word for path in sorted(reads) if path != Path("/") and not _under(path, Path("/usr"))
                 for word in ("--ro-bind", str(path), str(path))]
        env = [word for key, value in self.server.env.items() for word in ("--setenv", key, value)]
        workspace = "/workspace"
        argv = guarded([*_bwrap_base(jail.bwrap, jail.tmp_bytes), *binds, *env, "--bind", str(view), workspace,
                        "--chdir", workspace, resolved, *args])
        return argv, str(view)


def _docker_backend() -> type:
    from agentspec.sandbox.docker_backend import DockerBackend

    return DockerBackend


class MCPDockerToolkit(_ServerPerTree, _docker_backend()):  # type: ignore[misc]
    """A stdio MCP server inside the Docker sandbox: one copy of the server per container
    (:mod:`agentspec.mcp_docker` says how it runs there, and in which image).

    ``source``: the live workspace's initial files; ``image``: the sandbox image (default: the development image,
    ``envs/sandboxes/dev.toml``, built once); ``packages``: the distributions copied in for a Python server; the
    other options are :class:`~agentspec.sandbox.docker_backend.DockerBackend`'s (``limits``, ``commit_mode``,
    ``client``, ``disk_cap``...).
    """

    kind = "mcp-docker"
    _client: Any
    _user: str

    def __init__(self, server: MCPServer, source: Path | None = None, *, image: str | None = None,
                 packages: Sequence[str] = ("mcp",), **options: Any) -> None:
        from agentspec.sandbox.program import RUNNER_FILE, SandboxProgram
        from agentspec.tools import Toolkit

        self._init_servers(server)
        # The container's PID 1 is the backend's runner (--init); its one-shot tool runs are never used here.
        super().__init__(SandboxProgram(Toolkit(), RUNNER_FILE), source, image=image or "", **options)
        self.base_image = image
        self.packages = tuple(packages)
        self.runtime: Any = None
        self._here = Path.cwd()

    async def start(self) -> None:
        """Build (or find) the runtime image, start the live container and its server, and read the tools."""
        from agentspec.mcp_docker import dev_image, runtime_image
        from agentspec.sandbox import _docker

        if self.group is not None:
            return
        server = self.server
        assert server.command is not None
        try:
            if self._client is None:
                self._client = await anyio.to_thread.run_sync(_docker.connect)
            base = self.base_image or await _docker.call("building the development image", dev_image, self._client)
            self.runtime = await _docker.call("preparing the MCP server's image", runtime_image, self.api, base,
                                              server.command, server.args, server.env, packages=self.packages,
                                              here=self._here)
        except BaseException:
            backend: Any = _docker_backend()  # its close: this toolkit's own stops servers it has not started
            with anyio.CancelScope(shield=True):
                await backend.close(self)
            raise
        self.image = self.runtime.tag
        await super().start()

    @property
    def isolation(self) -> dict[str, object]:
        """The Docker backend's: the container's limits bound its server too."""
        return {**super().isolation, "servers": "one per container"}

    async def _run(self, box: Any, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        observation = await super()._run(box, step, call, requestor)
        overrun = await self._disk_overrun(box)  # the backend's backstop behind a lazily applied disk quota
        return error_observation(call, requestor, overrun) if overrun is not None else observation

    def _server_transport(self, box: Any) -> Transport:
        from agentspec.mcp_docker import exec_transport

        container: str = box.container
        if self.runtime is None:
            raise EnvError(f"the MCP sandbox for {self.server.label} is not started")
        runtime = self.runtime
        return lambda: exec_transport(self.api, container, runtime, self._user, lambda: self._kill_all(container))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
