"""A small MCP server (stdio) keeping notes as files under a root folder: its whole state is those files.

    python tests/servers/notes_server.py [ROOT]        # ROOT: argv, else $NOTES_ROOT, else the working directory
    python tests/servers/notes_server.py ROOT --http PORT   # streamable HTTP on 127.0.0.1:PORT/mcp instead

Besides its tools it offers resources (``notes://index``, ``notes://note/{name}``) and a prompt (``review_notes``).
``list_notes`` and ``read_note`` declare ``readOnlyHint``; ``add_note`` declares itself additive and closed-world
(still state-changing); ``delete_note`` has no annotations at all, so the MCP defaults apply to it.  Every call
reads the folder afresh (nothing is kept in memory), so a copy of the server over a forked folder is a fork of it.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

_parser = argparse.ArgumentParser(description="notes as files under ROOT, over MCP")
_parser.add_argument("root", nargs="?", default=os.environ.get("NOTES_ROOT", "."))
_parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
ARGS = _parser.parse_args()
ROOT = Path(ARGS.root)
server = MCPServer("notes")


def _notes() -> list[Path]:
    return sorted(ROOT.glob("*.note")) if ROOT.is_dir() else []


def _path(name: str) -> Path:
    if not re.fullmatch(r"[\w-]+", name):
        raise ToolError(f"bad note name {name!r}: letters, digits, '_' and '-' only")
    return ROOT / f"{name}.note"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def list_notes() -> str:
    """List the notes: one 'name: first line' per line."""
    lines = [f"{p.stem}: {p.read_text(encoding='utf-8').splitlines()[0] if p.stat().st_size else ''}" for p in _notes()]
    return "\n".join(lines) or "(no notes)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def read_note(name: str) -> str:
    """Read one note.

    Args:
        name: The note's name, as list_notes shows it.
    """
    path = _path(name)
    if not path.is_file():
        raise ToolError(f"no note {name!r}")
    return path.read_text(encoding="utf-8")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
def add_note(text: str, name: str = "") -> str:
    """Write a new note.

    Args:
        text: What to write down.
        name: The note's name (default: note-N).
    """
    ROOT.mkdir(parents=True, exist_ok=True)
    name = name or f"note-{len(_notes()) + 1}"
    _path(name).write_text(text, encoding="utf-8")
    return f"saved note {name}"


@server.tool()
def delete_note(name: str) -> str:
    """Delete a note.

    Args:
        name: The note to delete.
    """
    path = _path(name)
    if not path.is_file():
        raise ToolError(f"no note {name!r}")
    path.unlink()
    return f"deleted note {name}"


@server.resource("notes://index", mime_type="text/plain")
def index() -> str:
    """Every note's name and first line (what list_notes answers), as a resource."""
    return list_notes()


@server.resource("notes://note/{name}", mime_type="text/plain")
def note(name: str) -> str:
    """One note, as a resource."""
    return read_note(name)


@server.prompt()
def review_notes(focus: str = "") -> str:
    """Ask for a review of the notes.

    Args:
        focus: What the review should look at.
    """
    return f"Review my notes{' about ' + focus if focus else ''}:\n{list_notes()}"


if __name__ == "__main__":
    if ARGS.http is not None:
        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=ARGS.http))
    else:
        server.run()
