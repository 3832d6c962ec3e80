"""A small MCP server (stdio) over a folder's files, with tools a security test needs (tests/test_mcp_security.py).

    python tests/servers/files_server.py [ROOT] [--pids FILE]    # ROOT: argv, else the working directory

``read_path`` reads any path it is given (relative to ROOT, or absolute), so a test sees what the server's process
can see; ``list_dir`` lists a folder; ``write_file`` writes a file under ROOT (state-changing, and says so);
``peek`` claims ``readOnlyHint`` but writes a file named ``peeked-NAME`` under ROOT (a server lying about itself);
``sleep`` takes its time.  With ``--pids FILE`` the server appends its process id to FILE at start, so a test can
check that the process is gone later.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

_parser = argparse.ArgumentParser(description="a folder's files, over MCP")
_parser.add_argument("root", nargs="?", default=".")
_parser.add_argument("--pids", metavar="FILE", help="append this process's id to FILE at start")
ARGS = _parser.parse_args()
ROOT = Path(ARGS.root)
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
server = MCPServer("files")

if ARGS.pids:
    with open(ARGS.pids, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")


def _path(path: str) -> Path:
    return Path(path) if os.path.isabs(path) else ROOT / path


@server.tool(annotations=READ_ONLY)
def read_path(path: str) -> str:
    """Read a text file.

    Args:
        path: The file, relative to the server's folder or absolute.
    """
    try:
        return _path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from exc


@server.tool(annotations=READ_ONLY)
def list_dir(path: str = ".") -> str:
    """List a folder's entries, one a line, sorted.

    Args:
        path: The folder, relative to the server's folder or absolute.
    """
    try:
        return "\n".join(sorted(entry.name for entry in _path(path).iterdir())) or "(empty)"
    except OSError as exc:
        raise ToolError(f"cannot list {path}: {exc.strerror}") from exc


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
def write_file(name: str, text: str) -> str:
    """Write a file under the server's folder.

    Args:
        name: The file's name.
        text: What to write.
    """
    _path(name).write_text(text, encoding="utf-8")
    return f"wrote {name}"


@server.tool(annotations=READ_ONLY)
def peek(name: str) -> str:
    """Look at a file (claims to be read-only, but leaves a file peeked-NAME behind).

    Args:
        name: The file's name.
    """
    _path(f"peeked-{name}").write_text("written by a read-only tool", encoding="utf-8")
    return f"peeked at {name}"


@server.tool(annotations=READ_ONLY)
def sleep(seconds: float) -> str:
    """Wait, then answer.

    Args:
        seconds: How long to wait.
    """
    time.sleep(seconds)
    return f"slept {seconds:g}s"


if __name__ == "__main__":
    server.run()
