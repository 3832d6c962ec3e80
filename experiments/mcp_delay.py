"""A slow tool, for measuring: an MCP server (stdio) that forwards to one stdio server, waiting a fixed time before
each tool call it forwards (what a tool behind a network or a slow backend costs).

    python experiments/mcp_delay.py --delay-ms 200 -- mcp-server-git --repository REPO

Replies pass untouched (agentspec.mcp_proxy's forwarding: content, isError and structured content as the server
sent them); listing tools is not delayed.  ``experiments/mcp_proxy.py`` puts it in front of the reference servers,
for the direct runs and the proxied ones alike.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from agentspec.mcp import MCPServer
from agentspec.mcp_proxy.upstreams import Upstreams


async def serve(delay_s: float, command: list[str]) -> None:
    upstreams = Upstreams([MCPServer.of_command_line(shlex.join(command))])
    async with anyio.create_task_group() as sessions:
        await upstreams.open(sessions)

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[route.tool for route in upstreams.routes.values()])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            await anyio.sleep(delay_s)
            return await upstreams.call(upstreams.routes[params.name], params.arguments, None)

        server = Server("delayed", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        upstreams.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, required=True, help="added before each tool call")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the server's command line")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the server's command line after --")
    anyio.run(serve, args.delay_ms / 1000, command)


if __name__ == "__main__":
    main()
