"""The upstream MCP servers the proxy fronts: their sessions, the tools they offer under the client's names, and
calls forwarded to them with the upstream's reply untouched.

A reply is passed on as the upstream sent it (content, ``isError``, structured content): the proxy does not
validate it against the tool's output schema, the client does, as it would directly.  A call that gets no reply
raises the SDK's :class:`mcp.MCPError` the client would get directly: the upstream's own error, ``Connection
closed`` (-32000) once the upstream has exited, every later call included.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio.abc
from mcp import MCPError, types

from agentspec.errors import ConfigError
from agentspec.mcp import MCPServer, Session, connection_closed, transport

#: What a tool name may hold (SEP-986): names built here from server names keep to it.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Upstream:
    """One connected upstream server and the name its clashing tools are prefixed with."""

    server: MCPServer
    session: Session
    name: str


@dataclass(frozen=True)
class Route:
    """Where a tool the client sees goes: its upstream, the upstream's own name for it, and its listing (renamed
    where it clashed).  ``annotated_read_only``: the upstream says ``readOnlyHint: true``."""

    upstream: Upstream
    upstream_name: str
    tool: types.Tool

    @property
    def annotated_read_only(self) -> bool:
        annotations = self.tool.annotations
        return bool(annotations is not None and annotations.read_only_hint)


def closed() -> MCPError:
    """The error a client gets from an upstream that has exited (the SDK's own, for calls made after the end)."""
    return MCPError(code=connection_closed(), message="Connection closed")


class Upstreams:
    """Connects to every upstream (:meth:`open`), names their tools (:attr:`routes`) and forwards calls."""

    def __init__(self, servers: Sequence[MCPServer]) -> None:
        self.servers = tuple(servers)
        self.upstreams: list[Upstream] = []
        self.routes: dict[str, Route] = {}
        self.renamed: list[str] = []
        """One line per tool name two upstreams both offer: what the client sees each as."""

    async def open(self, group: anyio.abc.TaskGroup) -> None:
        """Start every upstream in ``group`` (their sessions live in tasks of their own) and list their tools;
        :class:`~agentspec.errors.EnvError` when one does not come up."""
        names: list[str] = []
        for server in self.servers:
            session = Session(functools.partial(transport, server), server, server.label)
            await session.open(group)
            name = _unique(_server_name(session, server), names)
            names.append(name)
            self.upstreams.append(Upstream(server, session, name))
        self.routes, self.renamed = _routes(self.upstreams)
        for line in self.renamed:
            print(f"agentspec mcp-proxy: {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Ask every upstream session to end (a stdio server's process stops); returns at once."""
        for upstream in self.upstreams:
            upstream.session.stop()

    @staticmethod
    def alive(upstream: Upstream) -> bool:
        """Whether ``upstream``'s connection is still open (a result pre-executed before it ended must not answer
        a call the client would see fail).  The SDK has no public flag: its dispatcher's is read where it exists."""
        client = upstream.session.session
        if client is None:
            return False
        return not getattr(getattr(client, "_dispatcher", None), "_closed", False)

    async def call(self, route: Route, arguments: dict[str, Any] | None, timeout_s: float | None) -> types.CallToolResult:
        """Forward one call to ``route``'s upstream and return its reply as it came (``timeout_s``: None waits for
        as long as the caller does)."""
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=route.upstream_name,
                                                                           arguments=arguments))
        # send_request, not call_tool: call_tool validates structured content against the output schema, and
        # a reply the client would refuse must reach the client to be refused there.
        return await send(route.upstream, request, types.CallToolResult, timeout_s)


Reply = TypeVar("Reply", bound=types.Result)


async def send(upstream: Upstream, request: Any, result: type[Reply], timeout_s: float | None) -> Reply:
    """Send ``request`` to ``upstream`` and return its reply as it came; the error a direct client would get when
    it fails (``Connection closed`` once the upstream has ended)."""
    client = upstream.session.session
    if client is None:
        raise closed()
    try:
        reply: Reply = await client.send_request(request, result, request_read_timeout_seconds=timeout_s)
    except MCPError:
        if upstream.session.done.is_set():
            raise closed() from None
        raise
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        raise closed() from None
    return reply


def _server_name(session: Session, server: MCPServer) -> str:
    """A short name for an upstream: the name it gives itself, else its command's (or URL's host's)."""
    info = getattr(session.session, "server_info", None)
    fallback = Path(server.command).name if server.command else urlsplit(server.url or "").hostname
    name = getattr(info, "name", None) or fallback or "server"
    return _NAME_CHARS.sub("-", name).strip("-") or "server"


def _unique(name: str, taken: Sequence[str]) -> str:
    if name not in taken:
        return name
    number = 2
    while f"{name}-{number}" in taken:
        number += 1
    return f"{name}-{number}"


def _routes(upstreams: Sequence[Upstream]) -> tuple[dict[str, Route], list[str]]:
    """Every tool under the name the client sees: its own, or ``UPSTREAM__TOOL`` where two upstreams offer the
    same name (and only then: a single server's tools keep the names its users know)."""
    offered = Counter(tool["name"] for upstream in upstreams for tool in upstream.session.tools)
    routes: dict[str, Route] = {}
    renamed: dict[str, list[str]] = {}
    for upstream in upstreams:
        for listing in upstream.session.tools:
            tool = types.Tool.model_validate(listing)
            name = tool.name
            if offered[name] > 1:
                name = f"{upstream.name}__{tool.name}"
                renamed.setdefault(tool.name, []).append(name)
                tool = tool.model_copy(update={"name": name})
            if name in routes:
                raise ConfigError(f"two upstreams offer a tool named {name!r}, even after prefixing clashing names")
            routes[name] = Route(upstream, listing["name"], tool)
    return routes, [f"tool {name!r} is offered by {len(names)} upstreams: the client sees it as {', '.join(names)}"
                    for name, names in sorted(renamed.items())]
