"""An MCP server (stdio) that misbehaves on purpose, one tool per way a server fails a client.

``ping`` answers; ``hang`` never answers; ``crash`` kills the server in the middle of the call; ``malformed``
returns structured content that breaks the output schema it declares (the client must refuse it).  Each call is
appended to the file named by ``$FAULTY_LOG`` (when set), so a test sees how often the server was started and
called.
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

server = MCPServer("faulty")
READ_ONLY = ToolAnnotations(read_only_hint=True)


def _log(what: str) -> None:
    if path := os.environ.get("FAULTY_LOG"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {what}\n")


_log("start")


@server.tool(annotations=READ_ONLY)
def ping() -> str:
    """Answer pong."""
    _log("ping")
    return "pong"


@server.tool(annotations=READ_ONLY)
def hang() -> str:
    """Never answer."""
    _log("hang")
    time.sleep(3600)
    return "late"


@server.tool(annotations=READ_ONLY)
def crash() -> str:
    """Kill this server in the middle of the call."""
    _log("crash")
    os._exit(3)


@server.tool(annotations=READ_ONLY, structured_output=False)
def malformed() -> CallToolResult:
    """Return a result whose structured content breaks the declared output schema."""
    _log("malformed")
    return CallToolResult(content=[TextContent(type="text", text="oops")], structured_content={"count": "many"})


# The declared output schema the result above breaks (the client validates results against it).
server._tool_manager.get_tool("malformed").output_schema = {  # noqa: SLF001 - the flaw is the point
    "type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"],
}

if __name__ == "__main__":
    server.run()
