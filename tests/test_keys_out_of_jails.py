"""Keys and secrets never enter a jail (issue 37): a jailed workspace tool and GAIA's Python sandbox, started from the
user's ``$HOME`` where agentspec's cache holds the run-log key, cannot read the key or anything else of the home
folder (the sandboxed MCP server's case is in tests/test_mcp_jail.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sandbox_support import SECRET, require_bwrap

from agentspec.types import ToolCall
from envs.gaia.bench import GaiaBench
from envs.workspace.environment import open_workspace

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"
SNOOP = ("import os\n"
         "seen, found = [], []\n"
         "for top, dirs, files in os.walk('/'):\n"
         "    dirs[:] = [d for d in dirs if os.path.join(top, d) not in ('/proc', '/sys', '/usr', '/dev')]\n"
         "    found += [os.path.join(top, f) for f in files if f == 'runlog.key']\n"
         "for path in {paths!r} + found:\n"
         "    try:\n"
         "        seen.append(open(path).read())\n"
         "    except OSError as exc:\n"
         "        seen.append(type(exc).__name__)\n"
         "print(seen)\n")


def _snoop(home: Path) -> ToolCall:
    key = home / ".cache" / "agentspec" / "runlog.key"
    paths = [str(key), ".cache/agentspec/runlog.key", "../.cache/agentspec/runlog.key", str(home / ".cache")]
    return ToolCall(name="run_python", arguments={"code": SNOOP.format(paths=paths), "timeout_s": 20})


@pytest.mark.parametrize("kind", ["overlay", "copy"])
@pytest.mark.anyio
async def test_a_jailed_workspace_tool_started_in_home_cannot_read_the_key(kind: str, home: Path) -> None:
    require_bwrap()
    project = home / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")
    async with open_workspace(kind, source=project) as live:
        seen = await live.execute(_snoop(home))
        shell = await live.execute(ToolCall(name="run_shell", arguments={"command": f"cat {home}/.cache/agentspec/*"}))
    assert not seen.error, seen.content
    assert SECRET not in seen.content and SECRET not in shell.content
    assert "FileNotFoundError" in seen.content and "No such file or directory" in shell.content


@pytest.mark.anyio
async def test_gaias_python_sandbox_started_in_home_cannot_read_the_key(home: Path) -> None:
    require_bwrap()
    bench = GaiaBench.from_data_dir(FIXTURES, backend="overlay")
    async with bench.open_backend(bench.task("ours-0012"), solo=True) as live:
        seen = await live.execute(_snoop(home))
        listing = await live.execute(ToolCall(name="run_python", arguments={"code": "import os; print(os.listdir('.'))"}))
    assert not seen.error, seen.content
    assert SECRET not in seen.content
    assert "numbers.txt" in listing.content  # the sandbox works: it holds the question's attachment alone


@pytest.mark.parametrize("kind", ["overlay", "copy"])
@pytest.mark.anyio
async def test_a_jailed_call_writes_only_its_tree_and_its_tmp(kind: str, tmp_path: Path) -> None:
    """The jail's root is bubblewrap's tmpfs in memory, without a size: sealed read-only, so a call cannot fill it."""
    require_bwrap()
    code = ("import os\n"
            "for path in ('/big', '/etc/x', '/opt/agentspec/x', '/workspace/ok', '/tmp/ok'):\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "        print(path, 'written')\n"
            "    except OSError as exc:\n"
            "        print(path, type(exc).__name__)\n"
            "open('/dev/null', 'w').write('devices still answer')\n")
    async with open_workspace(kind) as live:
        seen = await live.execute(ToolCall(name="run_python", arguments={"code": code}))
    assert not seen.error, seen.content
    lines = dict(line.split(" ", 1) for line in seen.content.strip().splitlines())
    assert lines == {"/big": "OSError", "/etc/x": "OSError", "/opt/agentspec/x": "OSError",
                     "/workspace/ok": "written", "/tmp/ok": "written"}, lines
