"""The proxy as an MCP server, over stdio (what desktop clients start) or streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from agentspec.errors import ConfigError
from agentspec.mcp_proxy.config import ProxyConfig
from agentspec.mcp_proxy.core import Proxy, open_proxy

#: The only address the HTTP transport listens on: the proxy runs tools on the user's behalf.
HOST = "127.0.0.1"


def mcp_server(proxy: Proxy) -> Server[Any]:
    """An MCP server offering the upstreams' tools, each call answered by ``proxy``, and their resources and
    prompts where any upstream offers them (forwarded: the proxy declares only what its upstreams do)."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=proxy.tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await proxy.call(params.name, params.arguments)

    catalog = proxy.catalog
    handlers: dict[str, Any] = {}
    if catalog.has_resources:

        async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
            return types.ListResourcesResult(resources=[resource for _, resource in catalog.resources])

        async def list_templates(ctx: Any, params: types.PaginatedRequestParams | None
                                 ) -> types.ListResourceTemplatesResult:
            return types.ListResourceTemplatesResult(resource_templates=[t for _, t in catalog.templates])

        async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
            return await proxy.read_resource(str(params.uri))

        handlers |= {"on_list_resources": list_resources, "on_list_resource_templates": list_templates,
                     "on_read_resource": read_resource}
    if catalog.has_prompts:

        async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
            return types.ListPromptsResult(prompts=[prompt for _, _, prompt in catalog.prompts.values()])

        async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
            return await proxy.get_prompt(params.name, params.arguments)

        handlers |= {"on_list_prompts": list_prompts, "on_get_prompt": get_prompt}
    return Server("agentspec-mcp-proxy", on_list_tools=list_tools, on_call_tool=call_tool, **handlers)


def _check_port(port: int) -> None:
    """A ConfigError line now when ``port`` cannot be listened on (uvicorn would log it and exit the process)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            raise ConfigError(f"--port {port}: cannot listen on {HOST}:{port} ({exc.strerror or exc})") from None


async def _until_signalled(stop: Callable[[], None]) -> None:
    """Stop the proxy on SIGTERM or SIGINT (a desktop client stops its servers so), so that the stats are written."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop()
            return


async def serve_stdio(config: ProxyConfig) -> None:
    """Serve one client on stdin/stdout until it closes them (or a signal), then report."""
    async with open_proxy(config) as proxy, anyio.create_task_group() as group:
        group.start_soon(_until_signalled, group.cancel_scope.cancel)
        server = mcp_server(proxy)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()


async def serve_http(config: ProxyConfig, port: int) -> None:
    """Serve streamable HTTP at ``http://127.0.0.1:PORT/mcp`` until SIGINT or SIGTERM, then report."""
    import uvicorn

    class Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a caught SIGTERM after its shutdown, which would end the process before the stats
            # are written: the proxy's own receiver asks it to exit instead.
            yield

    _check_port(port)
    async with open_proxy(config) as proxy, anyio.create_task_group() as group:
        app = mcp_server(proxy).streamable_http_app(host=HOST)
        server = Uvicorn(uvicorn.Config(app, host=HOST, port=port, log_level="warning", lifespan="on"))
        group.start_soon(_until_signalled, lambda: setattr(server, "should_exit", True))
        await server.serve()
        group.cancel_scope.cancel()
