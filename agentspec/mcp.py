"""MCP servers as agentspec environments, on the official ``mcp`` SDK (``pip install 'agentspec[mcp]'``).

A server's tools become the agent's tools; what may run speculatively fails closed (see Effects)::

    async with MCPToolkit.stdio("python", "tests/servers/notes_server.py", "notes", trust_annotations=True) as tools:
        result = await Executor(tools, authority=..., speculator=..., mode="sa").run("Write down 'milk'")

    MCPToolkit.http("http://127.0.0.1:8000/mcp")           # a streamable HTTP server
    MCPToolkit.stdio("python", "server.py", sandbox="overlay")   # one copy of the server per fork (see below)
    MCPToolkit.stdio("python", "server.py", sandbox="docker")    # ... each in its fork's container

**Effects.**  The MCP specification's defaults are ``readOnlyHint=false``, ``destructiveHint=true``,
``openWorldHint=true``, so a tool without annotations may change anything anywhere; and annotations are hints a
server gives about itself, which the specification says clients must not trust from an untrusted server.
agentspec cannot fork the state of a server it merely talks to (forks share the one live server), so by default
*every* tool of such a server is ``external``: it runs only once the authority has decided it, never speculatively.
A server the user trusts (``trust_annotations=True``; the bench option ``trust_annotations=true``) has its
``readOnlyHint: true`` tools run speculatively, against the live server: a tool that claims to be read-only but
writes then writes into the live world from a guess.  Every result of such a toolkit says so
(``Observation.isolation == "trusted-annotations"``).  See :meth:`agentspec.types.ToolSpec.from_mcp`.

**Failures.**  Every call has a deadline (``call_timeout_s``).  A server that hangs, exits in the middle of a
call, or answers with something that is not a valid tool result gives the agent one error observation saying
which, never a hang or a traceback; the server is stopped and started again for the next call (a stdio server is
a new process; its state is whatever it keeps outside itself).  Nothing committed is lost: the executor's
history holds every committed step, and a call that failed commits as that error.  A server that cannot be
started at all is an :class:`~agentspec.errors.EnvError` naming the command and what it wrote.  A stdio server
runs behind :mod:`agentspec.sandbox.parent_guard`'s guard: it dies with agentspec's process however that ends
(SIGTERM, SIGINT, SIGKILL), never left running on its own.  The servers' sessions live in a task of the toolkit's
own, so a toolkit may be closed from any task and inside any cancel scope.

**A server inside a sandbox** (``sandbox="overlay"`` or ``"copy"``, CLI ``--mcp-sandbox overlay``): the stdio
server runs under bubblewrap (:mod:`agentspec.sandbox.overlay`'s jail: no network, nothing writable but its tree
and a private ``/tmp``) with its working directory the sandbox's tree.  Each fork gets its own copy of the server
over its own forked tree, so the server's state-changing tools (unannotated ones included) run speculatively in
forks and are committed or dropped with the tree, like any sandbox tool.  This suits only servers whose whole
state is files under their working directory, re-read on every call (a notes or file-system server, a SQLite file
there): a server is stopped and restarted whenever its tree is frozen, promoted or dropped, so anything it keeps
in memory, or anywhere else, is lost or, worse, shared across forks.

What the jail sees, read-only, besides ``/usr``: what the server's command needs to run and nothing else.  That is
its executable's install tree (a ``bin/`` folder's parent: the venv, ``/opt/NAME`` or npm prefix it lives in),
the same for each link target and ``#!`` interpreter on the way (a venv's base Python included), and the program
file an interpreter runs (``python server.py``, ``node server.js``: that one file, at its absolute path).  It
never sees the folder agentspec runs in, ``$HOME`` or agentspec's cache (where the run-log key is): an install
tree that is one of them, or holds one, is left out and only the executable's own file is mounted.  A command
``python`` (or ``python3``) is the Python that runs agentspec.  Every other argument is the server's own, taken
relative to its working directory, the tree: ``mcp-server-filesystem .`` serves the tree, never the host folder.

Read-only calls in forks are look-ahead: the speculator's guesses, and a fit's or a mining run's probes (a fit
probes every read-only tool it can fill the arguments of, at every state of every task).  With
``lookahead_timeout_s`` (the ``mcp`` bench sets it for ``agentspec mine`` and ``speculator fit|score``), such a call
has that deadline instead of ``call_timeout_s``, and a tool that ran past it is not run in a fork again by the
toolkits sharing its ``slow_tools`` set (it answers an error observation at once): one slow tool costs one
deadline, not one per probe.

``sandbox="docker"`` (CLI ``--mcp-sandbox docker``) runs each copy of the server in its branch's container of the
Docker sandbox instead (:class:`MCPDockerToolkit`, :mod:`agentspec.mcp_docker`): the same one-server-per-state bookkeeping, a container's
confinement and limits, and a derived image that carries the MCP SDK and the server's program file in (containers
have no network).
"""

from __future__ import annotations

import json
import math
import os
import re
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
    "Session", "connection_closed", "render", "sandboxed_toolkit", "transport",
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

    def __init__(self, message: str, *, broken: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.broken = broken
        self.timed_out = timed_out


Transport = Callable[[], AbstractAsyncContextManager[Any]]


class Session:
    """One MCP client session, run by a task of its own (the toolkits' and the MCP proxy's upstream connections).

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

    async def call(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> tuple[str, bool]:
        """(text the agent sees, whether the tool reported an error); :class:`_CallFailed` without a result.
        ``timeout_s``: this call's deadline (default the server's ``call_timeout_s``)."""
        session = self.session
        if session is None:
            raise _CallFailed(f"the MCP server {self.label} is not running ({self.failure or 'stopped'})", broken=True)
        limit = self.server.call_timeout_s if timeout_s is None else timeout_s
        mcp = _sdk()
        try:
            with anyio.fail_after(limit):
                result = await session.call_tool(name, arguments, read_timeout_seconds=limit)
        except TimeoutError as exc:
            raise _CallFailed(f"the MCP server {self.label} gave no answer to {name!r} within {limit:g}s; it was "
                              "stopped and will be started again for the next call", broken=True,
                              timed_out=True) from exc
        except mcp.MCPError as exc:
            # Connection closed: the server exited under the call.  Any other code is the server refusing the call
            # (unknown tool, bad arguments): the session itself is fine.
            closed = exc.code == connection_closed()
            if closed or self.done.is_set():
                raise _CallFailed(f"the MCP server {self.label} exited during the call to {name!r}; it will be "
                                  "started again for the next call", broken=True) from exc
            if exc.code == _request_timeout():
                raise _CallFailed(f"the MCP server {self.label} gave no answer to {name!r} within {limit:g}s; it "
                                  "was stopped and will be started again for the next call", broken=True,
                                  timed_out=True) from exc
            raise _CallFailed(f"the MCP server refused the call to {name!r}: {exc.error.message}", broken=False) from exc
        except (ValidationError, RuntimeError, ValueError, TypeError) as exc:
            # The SDK validates every result (schema, declared output schema): the answer is not a tool result.
            raise _CallFailed(f"the MCP server {self.label} answered {name!r} with a malformed result "
                              f"({_first_line(exc)})", broken=False) from exc
        if not isinstance(result, mcp.types.CallToolResult):
            raise _CallFailed(f"the MCP server {self.label} answered {name!r} with a {type(result).__name__}, not a "
                              "tool result", broken=False)
        return render(result), bool(result.is_error)

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


def connection_closed() -> int:
    """The MCP error code of a connection that closed under a request (the server exited): the SDK's
    ``CONNECTION_CLOSED``, imported when asked (the SDK is an optional dependency)."""
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


def render(result: Any) -> str:
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


#: How long the servers of a closing toolkit have to shut down (the SDK's own grace and kill come first).
SHUTDOWN_S = 20.0


def _spawn_system_task(work: Callable[[], Any]) -> Any:
    """Run ``work()`` in a task of no caller's task group (trio: a system task; asyncio: a loop task), returning
    what keeps it alive.  Its cancellation is its own, and it ends at the latest with the event loop."""
    try:
        import trio

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):  # not under trio: asyncio (anyio's other backend)
        import asyncio

        return asyncio.get_running_loop().create_task(work())
    trio.lowlevel.spawn_system_task(work, name="agentspec-mcp-sessions")
    return None


class _Host:
    """A task group held open by a task of its own, so whichever task (and cancel scope) started it may be another
    than the one that stops it: mining opens toolkits in one task and closes them in another, and the sandbox's
    start closes a toolkit from inside a shielded scope when it fails.  The sessions' owner tasks run in it."""

    def __init__(self) -> None:
        self.group: anyio.abc.TaskGroup | None = None
        self._ready = anyio.Event()
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._task: Any = None

    async def start(self) -> anyio.abc.TaskGroup:
        self._task = _spawn_system_task(self._hold)
        try:
            await self._ready.wait()
        except BaseException:
            self._stop.set()
            raise
        if self.group is None:  # pragma: no cover - the loop is shutting down
            raise EnvError("the MCP toolkit could not start its session task (the event loop is closing)")
        return self.group

    async def _hold(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                self.group = group
                self._ready.set()
                await self._stop.wait()
                # Every session was asked to stop; what has not ended by now is cancelled (the SDK kills its server).
                group.cancel_scope.deadline = anyio.current_time() + SHUTDOWN_S
        except Exception:  # noqa: BLE001, S110 - owner tasks report their own failures; nothing is left to tell
            pass
        finally:
            self.group = None
            self._ready.set()
            self._done.set()

    async def stop(self) -> None:
        """Let the group end (its sessions were asked to stop) and wait for it, from any task, shielded."""
        self._stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_S + 5.0):
            await self._done.wait()


class _SessionGroup:
    """The task group the sessions' owner tasks run in: started by start, ended by close, from any task.

    The group is held by a task of the toolkit's own (:class:`_Host`), so leaving it is only a signal and a wait:
    it can happen in another task than the start, and inside a shielded or cancelled scope, and an outer
    cancellation cannot stop the servers' shutdown half way.
    """

    group: anyio.abc.TaskGroup | None = None
    _host: _Host | None = None

    async def _enter_group(self) -> anyio.abc.TaskGroup:
        if self.group is None:
            host = _Host()
            self.group = await host.start()
            self._host = host
        return self.group

    async def _leave_group(self, sessions: Sequence[Session]) -> None:
        host, self._host, self.group = self._host, None, None
        for session in sessions:
            session.stop()
        if host is not None:
            await host.stop()


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

    session: Session | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)


#: What every result of a toolkit that trusts its server's annotations says (:attr:`Observation.isolation`).
TRUSTED_ANNOTATIONS = "trusted-annotations"


class MCPToolkit(_ServerTools, _SessionGroup, LineageBackend[_Link]):
    """An MCP server as a snapshot backend: the server's tools, every one ``external`` unless trusted.

    Its state is the server's, which agentspec cannot fork: forks share the one live connection.  Annotations
    are the server's word about itself, so by default no tool runs in a fork (all are ``external``); with
    ``trust_annotations=True`` the ``readOnlyHint: true`` tools do (READ_ONLY), and every observation says
    ``isolation="trusted-annotations"`` (see the module docstring).  Open it as ``async with
    MCPToolkit.stdio(...) as tools:`` (or ``await toolkit.start()`` and ``await toolkit.close()``, from any task):
    the connection lives in a task of its own until then.
    """

    kind = "mcp"

    def __init__(self, server: MCPServer, *, trust_annotations: bool = False) -> None:
        super().__init__()
        self.server = server
        self.trust_annotations = trust_annotations
        self._specs: dict[str, ToolSpec] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    def stdio(cls, command: str, *args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
              sandbox: SandboxKind | None = None, source: str | Path | None = None,
              call_timeout_s: float = CALL_TIMEOUT_S, trust_annotations: bool = False,
              **sandbox_options: Any) -> MCPToolkit | MCPSandboxToolkit | MCPDockerToolkit:
        """A server started as ``command *args`` and spoken to over its stdin/stdout.

        ``trust_annotations``: run its ``readOnlyHint`` tools speculatively, against the live server (see the
        class).  ``sandbox="overlay"`` (or ``"copy"``, or ``"docker"``) runs it inside a forkable sandbox instead,
        its working directory a tree first filled from ``source`` (:func:`sandboxed_toolkit`; ``cwd`` and
        ``trust_annotations`` do not apply there: each fork has its own copy of the server).
        """
        server = MCPServer(command=command, args=tuple(args), env=dict(env or {}),
                           cwd=str(cwd) if cwd is not None else None, call_timeout_s=call_timeout_s)
        if sandbox is not None:
            if trust_annotations:
                raise ConfigError("trust_annotations applies to a server outside a sandbox: a sandboxed server's "
                                  "forks each run their own copy, so its read-only tools are speculated anyway")
            return sandboxed_toolkit(server, sandbox, source, **sandbox_options)
        if source is not None or sandbox_options:
            raise ConfigError("source and sandbox options apply only to a server in a sandbox (sandbox='overlay')")
        return cls(server, trust_annotations=trust_annotations)

    @classmethod
    def http(cls, url: str, *, call_timeout_s: float = CALL_TIMEOUT_S, trust_annotations: bool = False) -> MCPToolkit:
        """A server at ``url``, spoken to over streamable HTTP."""
        return cls(MCPServer(url=url, call_timeout_s=call_timeout_s), trust_annotations=trust_annotations)

    @property
    def isolation(self) -> dict[str, object]:
        """What runs where, for reports: nothing is forked; read-only tools are speculated only when trusted."""
        return {"backend": self.kind, "forks": "share the live server",
                "speculated": "readOnlyHint tools (trusted annotations)" if self.trust_annotations else "nothing",
                "weakened": TRUSTED_ANNOTATIONS if self.trust_annotations else None}

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

    async def _connect(self, link: _Link) -> Session:
        if self.group is None:
            raise EnvError(f"the MCP toolkit for {self.server.label} is closed")
        session = Session(lambda: transport(self.server), self.server, self.server.label)
        await session.open(self.group)
        link.session = session
        self._specs = {tool["name"]: self._spec(tool) for tool in session.tools}
        return session

    def _spec(self, tool: dict[str, Any]) -> ToolSpec:
        """The tool's spec: READ_ONLY only where its ``readOnlyHint`` is trusted, else external (fail closed)."""
        spec = ToolSpec.from_mcp(tool)
        if spec.effect is Effect.READ_ONLY and not self.trust_annotations:
            return spec.model_copy(update={"effect": Effect.EXTERNAL})
        return spec

    def _label(self, observation: Observation) -> Observation:
        if not self.trust_annotations:
            return observation
        return observation.model_copy(update={"isolation": TRUSTED_ANNOTATIONS})

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


def _drop_session(link: _Link, session: Session) -> None:
    session.stop()
    if link.session is session:
        link.session = None


async def _observe(session: Session, call: ToolCall, requestor: Requestor, on_broken: Callable[[], None],
                   timeout_s: float | None = None, on_timeout: Callable[[], None] | None = None) -> Observation:
    """One call through ``session`` as an observation; a session that broke is dropped (``on_broken``), and one
    that ran past its deadline (``timeout_s``, default the server's) is reported to ``on_timeout`` too."""
    try:
        text, failed = await session.call(call.name, dict(call.arguments), timeout_s)
    except _CallFailed as exc:
        if exc.broken:
            on_broken()
        if exc.timed_out and on_timeout is not None:
            on_timeout()
        return error_observation(call, requestor, str(exc))
    if failed:
        return error_observation(call, requestor, text or "the tool failed")
    return Observation(call_id=call.id, name=call.name, content=text, requestor=requestor)


@asynccontextmanager
async def transport(server: MCPServer, argv: Sequence[str] | None = None, cwd: str | None = None,
                     env: Mapping[str, str] | None = None, guard: bool = True) -> AsyncIterator[Any]:
    """The SDK's stdio or streamable HTTP transport for ``server`` (``argv``: run this instead of its command).

    A stdio server runs behind the parent guard (``guard``; False: ``argv`` is guarded already), so it dies with
    this process: a SIGTERM to agentspec, which skips every ``finally``, leaves no server behind."""
    mcp = _sdk()
    if server.url is not None:
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(server.url) as streams:
            yield streams[0], streams[1]
        return
    if argv is None:
        argv = [_host_executable(server.executable(), cwd if cwd is not None else server.cwd, server.env.get("PATH")),
                *server.args]
    if guard and os.name == "posix":
        from agentspec.sandbox.parent_guard import guarded

        argv = guarded(argv)
    command, *args = argv
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


def _host_executable(command: str, cwd: str | None, path: str | None = None) -> str:
    """``command`` as an absolute path, found as the server's process would find it (a name on ``PATH``, a path
    relative to ``cwd``); EnvError when there is none."""
    if os.sep in command:
        found = Path(cwd or ".", command) if not os.path.isabs(command) else Path(command)
        if os.access(found, os.X_OK) and found.is_file():
            return str(found.absolute())
        raise EnvError(f"the MCP server's command {command} is not an executable file")
    hit = shutil.which(command, path=path if path is not None else os.environ.get("PATH", os.defpath))
    if hit is None:
        raise EnvError(f"the MCP server's command {command!r} is not found on PATH")
    return str(Path(hit).absolute())


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
    _servers: weakref.WeakKeyDictionary[Any, Session]

    def _init_servers(self, server: MCPServer, lookahead_timeout_s: float | None = None,
                      slow_tools: set[str] | None = None) -> None:
        if server.command is None:
            raise ConfigError("only a stdio server (a command) can run inside a sandbox, not a URL")
        if lookahead_timeout_s is not None and not lookahead_timeout_s > 0:
            raise ConfigError(f"lookahead_timeout_s must be a positive number of seconds, not {lookahead_timeout_s}")
        self.server = server
        self.lookahead_timeout_s = lookahead_timeout_s
        self.slow_tools = slow_tools if slow_tools is not None else set()
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

    def _deadline_s(self) -> float | None:
        return self.server.call_timeout_s + self.server.connect_timeout_s + 5.0

    async def _run(self, state: Any, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        # A read-only call in a fork is a look-ahead (a probe, a guess): bounded, where a bound is asked for.
        forked = state is not self._head.state  # type: ignore[attr-defined]
        limit = self.lookahead_timeout_s if forked and self.effect(call.name) is Effect.READ_ONLY else None
        if limit is not None and call.name in self.slow_tools:
            return error_observation(call, requestor, f"not run in a fork: {call.name!r} ran past the {limit:g}s "
                                     "look-ahead deadline earlier")
        if self.effect(call.name) is not Effect.READ_ONLY:
            state.dirty = True  # set first: a call killed half way may still have written
        try:
            session = await self._server_for(state)
        except EnvError as exc:
            return self._label(error_observation(call, requestor, str(exc)))  # type: ignore[attr-defined]
        if limit is None:
            return await _observe(session, call, requestor, session.stop)  # replaced by the next call on the state
        return await _observe(session, call, requestor, session.stop, min(limit, self.server.call_timeout_s),
                              lambda: self.slow_tools.add(call.name))

    async def _server_for(self, state: Any) -> Session:
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
        session = Session(self._server_transport(state), self.server, self.server.label)
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

    See the module docstring for which servers this suits (state only in files under their working directory)
    and what the jail sees.  The server's state-changing tools are MUTATING (IDEMPOTENT with ``idempotentHint``):
    they run in forks and reach the live tree only by commit.  ``source``: the tree's initial files;
    ``lookahead_timeout_s`` and ``slow_tools``: the bound on calls in forks (module docstring); the other options
    are :class:`~agentspec.sandbox.overlay.OverlayBackend`'s (``confinement="none"`` runs the servers unconfined).
    """

    def __init__(self, server: MCPServer, source: Path | None = None, *, mode: Literal["overlay", "copy"] = "overlay",
                 lookahead_timeout_s: float | None = None, slow_tools: set[str] | None = None,
                 **options: Any) -> None:
        from agentspec.sandbox.program import RUNNER_FILE, SandboxProgram
        from agentspec.tools import Toolkit

        self._init_servers(server, lookahead_timeout_s, slow_tools)
        # The jail is the overlay backend's; its program (the one-shot tool runner) is never run here.
        super().__init__(SandboxProgram(Toolkit(), RUNNER_FILE), source, mode=mode, **options)
        self._here = Path.cwd()
        self._command_line: tuple[list[str], list[str]] | None = None

    @property
    def isolation(self) -> dict[str, object]:
        """The overlay backend's confinement and disk cap; the per-call memory and process limits of its one-shot
        runner do not apply to a server (one long-lived process per tree), so they read None."""
        return {**super().isolation, "memory_bytes": None, "pids": None, "servers": "one per tree"}

    def _server_transport(self, tree: Any) -> Transport:
        argv, cwd = self._argv(tree.view)
        return lambda: transport(self.server, argv, cwd, guard=False)

    def _argv(self, view: Path) -> tuple[list[str], str]:
        """The guarded, jailed command line for a server over ``view``, and the directory it starts in."""
        from agentspec.sandbox.confinement import SEAL
        from agentspec.sandbox.parent_guard import guarded

        if self._command_line is None:
            self._command_line = self._jail_and_command()
        jail, command = self._command_line
        if not jail:  # confinement="none"
            return guarded(command), str(view)
        workspace = "/workspace"
        return guarded([*jail, "--bind", str(view), workspace, "--chdir", workspace, *SEAL, *command]), str(view)

    def _jail_and_command(self) -> tuple[list[str], list[str]]:
        """(bubblewrap's words but the tree's, or none when unconfined; the server's command line), worked out once.

        The arguments stay the server's own (relative ones relative to its working directory, the tree), but for
        the program file an interpreter runs, which is this host's (module docstring)."""
        from agentspec.sandbox.confinement import PATH, bwrap_base

        executable = _host_executable(self.server.executable(), str(self._here), self.server.env.get("PATH"))
        args = list(self.server.args)
        program = _program_file(executable, args, self._here)
        if program is not None:
            args[program[0]] = str(program[1])
        jail = self._require_jail()
        if jail.kind == "none":
            return [], [executable, *args]
        reads = _JailReads(off_limits=_off_limits(self._here))
        if self.server.command in ("python", "python3"):  # agentspec's own Python: its prefixes, as a venv has them
            reads.add_tree(Path(sys.prefix))
            reads.add_tree(Path(sys.base_prefix))
        reads.add_executable(Path(executable))
        if program is not None:
            reads.add_file(program[1])
        path = ":".join([*dict.fromkeys(reads.bins), PATH])
        env = [word for key, value in self.server.env.items() for word in ("--setenv", key, value)]
        return [*bwrap_base(jail.bwrap, jail.tmp_bytes), *reads.binds(), "--setenv", "PATH", path, *env], \
            [executable, *args]


def _docker_backend() -> type:
    from agentspec.sandbox.docker_backend import DockerBackend

    return DockerBackend


class MCPDockerToolkit(_ServerPerTree, _docker_backend()):  # type: ignore[misc]
    """A stdio MCP server inside the Docker sandbox: one copy of the server per container
    (:mod:`agentspec.mcp_docker` says how it runs there, and in which image).

    ``source``: the live workspace's initial files; ``image``: the sandbox image (default: the development image,
    ``agentspec/sandbox/definitions/dev.toml``, built once); ``packages``: the distributions copied in for a Python server;
    ``lookahead_timeout_s`` and ``slow_tools``: the bound on calls in forks (:mod:`agentspec.mcp`); the
    other options are :class:`~agentspec.sandbox.docker_backend.DockerBackend`'s (``limits``, ``commit_mode``,
    ``client``, ``disk_cap``...).
    """

    kind = "mcp-docker"
    _client: Any
    _user: str

    def __init__(self, server: MCPServer, source: Path | None = None, *, image: str | None = None,
                 packages: Sequence[str] = ("mcp",), lookahead_timeout_s: float | None = None,
                 slow_tools: set[str] | None = None, **options: Any) -> None:
        from agentspec.sandbox.program import RUNNER_FILE, SandboxProgram
        from agentspec.tools import Toolkit

        self._init_servers(server, lookahead_timeout_s, slow_tools)
        # The container's PID 1 is the backend's runner (--init); its one-shot tool runs are never used here.
        super().__init__(SandboxProgram(Toolkit(), RUNNER_FILE), source, image=image or "", **options)
        self.base_image = image
        self.packages = tuple(packages)
        self.runtime: Any = None
        self._here = Path.cwd()

    async def start(self) -> None:
        """Build (or find) the runtime image, start the live container and its server, and read the tools."""
        from agentspec.mcp_docker import dev_image, runtime_image
        from agentspec.sandbox import containers

        if self.group is not None:
            return
        server = self.server
        assert server.command is not None
        try:
            if self._client is None:
                self._client = await anyio.to_thread.run_sync(containers.connect)
            base = self.base_image or await containers.call("building the development image", dev_image, self._client)
            self.runtime = await containers.call("preparing the MCP server's image", runtime_image, self.api, base,
                                              server.command, server.args, server.env, packages=self.packages,
                                              program=_program_file(server.command, server.args, self._here))
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


# --------------------------------------------------------------------------- what a jailed server may read

#: Interpreters whose first plain argument is the program file they run (``python server.py``, ``node x.js``).
_INTERPRETERS = re.compile(r"(python[0-9.]*|node|nodejs|bun|deno)")
#: Their options that take the next argument as a value, and those after which no program file follows.
_OPTION_VALUES = frozenset({"-W", "-X", "-r", "--require", "--import", "--loader"})
_NO_PROGRAM = frozenset({"-m", "-c", "-e", "--eval", "-p", "--print", "-"})


def _program_file(executable: str, args: Sequence[str], here: Path) -> tuple[int, Path] | None:
    """The program file an interpreter ``executable`` runs, where it is a file of this host (relative to
    ``here``, the folder agentspec runs in, or absolute): (its index in ``args``, its absolute path); None for any
    other command, ``python -m MODULE``, or a program that is not on this host (it may be the tree's own)."""
    if not _INTERPRETERS.fullmatch(Path(executable).name):
        return None
    takes_value = False
    for index, arg in enumerate(args):
        if takes_value:
            takes_value = False
        elif arg in _NO_PROGRAM:
            return None
        elif arg in _OPTION_VALUES:
            takes_value = True
        elif not arg.startswith("-"):
            path = Path(arg) if os.path.isabs(arg) else here / arg
            return (index, path.resolve()) if path.is_file() else None
    return None


def _off_limits(here: Path) -> tuple[Path, ...]:
    """What a jail must never see, nor any folder holding it: the folder agentspec runs in, ``$HOME`` and
    agentspec's cache (which holds the run-log key, ``runlog.key``)."""
    from agentspec.data import cache_root

    places = [here, Path.home(), cache_root()]
    return tuple(dict.fromkeys(Path(os.path.abspath(place)) for place in places))


def _tree_of(path: Path) -> Path:
    """The install tree an executable file belongs to: the parent of its ``bin/`` folder (a venv, a prefix such
    as ``/opt/NAME``), the ``node_modules`` folder a package's file is in, else its own folder."""
    parts = path.parts
    if "node_modules" in parts[:-1]:
        return Path(*parts[:parts.index("node_modules") + 1])
    return path.parent.parent if path.parent.name in ("bin", "sbin") else path.parent


def _shebang(path: Path) -> list[Path]:
    """The interpreters a ``#!`` script names: the ``#!`` path and, for ``#!/usr/bin/env NAME``, NAME on PATH."""
    try:
        with path.open("rb") as handle:
            line = handle.readline(512)
    except OSError:
        return []
    if not line.startswith(b"#!"):
        return []
    words = line[2:].decode(errors="replace").split()
    if not words:
        return []
    found = [Path(words[0])]
    if found[0].name == "env":
        names = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        hit = shutil.which(names[0]) if names else None
        if hit is not None:
            found.append(Path(hit))
    return found


def _in_usr(path: Path) -> bool:
    """Whether ``path`` is in ``/usr`` (resolved: ``/bin`` is often a link to it), which every jail has."""
    return _under(Path(os.path.realpath(path)), Path("/usr"))


class _JailReads:
    """The host paths a jailed server reads (bound read-only at the same paths): install trees, and single files
    where a tree is off limits (see :func:`_off_limits`); ``bins``: their ``bin/`` folders, put on its PATH."""

    def __init__(self, off_limits: Sequence[Path]) -> None:
        self.off_limits = tuple(off_limits)
        self.trees: set[Path] = set()
        self.files: set[Path] = set()
        self.bins: list[str] = []

    def allowed(self, tree: Path) -> bool:
        """Whether ``tree`` may be bound: not ``/``, and neither off limits nor holding anything that is."""
        return tree != Path("/") and not any(_under(place, tree) for place in self.off_limits)

    def add_tree(self, tree: Path) -> bool:
        """Bind ``tree`` (False: it is off limits, nothing was bound)."""
        tree = Path(os.path.abspath(tree))
        if _in_usr(tree):
            return True
        if not self.allowed(tree):
            return False
        self.trees.add(tree)
        config = tree / "pyvenv.cfg"  # a venv: its base Python too (a venv made with --copies has no link to it)
        if config.is_file():
            for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    self.add_tree(_tree_of(Path(value.strip()) / "python"))
        return True

    def add_file(self, path: Path) -> None:
        path = Path(os.path.abspath(path))
        if not _in_usr(path) and not any(_under(place, path) for place in self.off_limits):
            self.files.add(path)

    def add_executable(self, path: Path, depth: int = 0) -> None:
        """An executable, the link it is (each step's target) and the interpreters its ``#!`` line names."""
        path = Path(os.path.abspath(path))
        seen = [path]
        while path.is_symlink() and len(seen) < 16:  # every link on the way, relative ones included
            path = Path(os.path.abspath(path.parent / os.readlink(path)))
            seen.append(path)
        for step in seen:
            if not self.add_tree(_tree_of(step)):
                self.add_file(step)
            if step.parent.name in ("bin", "sbin") and not _in_usr(step) and self.allowed(step.parent):
                self.bins.append(str(step.parent))
        if depth < 4:
            for interpreter in _shebang(seen[-1]):
                self.add_executable(interpreter, depth + 1)

    def binds(self) -> list[str]:
        """bubblewrap's ``--ro-bind`` words: each tree (outer ones first), then each file outside them."""
        trees = sorted(tree for tree in self.trees if not any(o != tree and _under(tree, o) for o in self.trees))
        files = sorted(f for f in self.files if not any(_under(f, tree) for tree in trees))
        return [word for path in [*trees, *files] for word in ("--ro-bind", str(path), str(path))]
