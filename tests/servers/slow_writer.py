"""A stdio MCP server whose writing tool is slow: it appends to a store (a file outside agentspec), then takes its
time to answer, so a run killed at a random moment is often killed in the middle of the call, after the write.

    python tests/servers/slow_writer.py STORE [--delay S]     # S: seconds between the write and the answer (0.6)

``append_item(item)`` appends the line ``item`` to STORE (one ``write``, flushed and fsynced), sleeps ``--delay``
seconds and answers ``appended ITEM``; it declares no annotations, so the MCP defaults apply (state-changing, not
idempotent: agentspec runs it once, when the authority asks, and cannot fork it).  ``count_item(item)`` is
read-only: how many lines of STORE are ``item``.  Nothing is kept in memory: every call reads or appends to STORE,
so the store alone says which writes happened (tests/test_kill_campaign.py counts them).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

_parser = argparse.ArgumentParser(description="a slow append-only store over MCP")
_parser.add_argument("store", help="the file the writes are appended to (created)")
_parser.add_argument("--delay", type=float, default=0.6, help="seconds between the write and the answer")
ARGS = _parser.parse_args()
STORE = Path(ARGS.store)
server = MCPServer("slow-writer")


def _item(item: str) -> str:
    if not item or "\n" in item:
        raise ToolError(f"bad item {item!r}: one non-empty line")
    return item


@server.tool()
def append_item(item: str) -> str:
    """Append an item to the store (slowly).

    Args:
        item: The item, one line.
    """
    line = (_item(item) + "\n").encode()
    fd = os.open(STORE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of one line: a kill leaves the line whole or absent
        os.fsync(fd)
    finally:
        os.close(fd)
    time.sleep(ARGS.delay)
    return f"appended {item}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def count_item(item: str) -> str:
    """How many times an item is in the store.

    Args:
        item: The item, one line.
    """
    item = _item(item)
    lines = STORE.read_text(encoding="utf-8").splitlines() if STORE.is_file() else []
    return f"{item}: {lines.count(item)}"


if __name__ == "__main__":
    server.run()
