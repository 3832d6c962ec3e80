"""What a sandboxed MCP server sees (issue 37, items 1, 2 and 14): only what its command needs to run, read-only,
never the folder agentspec runs in, ``$HOME`` or agentspec's cache (the run-log key); and its arguments are its
own, relative to its tree, never rewritten to host folders."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from sandbox_support import SECRET, require_bwrap
from test_mcp import call

from agentspec.mcp import MCPSandboxToolkit, MCPToolkit
from agentspec.sandbox import Limits

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "tests" / "servers" / "files_server.py"


def test_jailed_server_started_in_home_cannot_read_the_run_log_key(home: Path):
    require_bwrap()
    shutil.copy(FILES, home / "server.py")  # the user's own server, beside their cache
    key = home / ".cache" / "agentspec" / "runlog.key"

    async def main() -> dict[str, str]:
        async with MCPToolkit.stdio("python", "server.py", sandbox="overlay") as tools:
            seen = {}
            for path in (str(key), ".cache/agentspec/runlog.key", "../home/.cache/agentspec/runlog.key",
                         str(home / "notes.txt")):
                seen[path] = (await tools.execute(call("read_path", path=path))).content
            seen["home"] = (await tools.execute(call("list_dir", path=str(home)))).content
            seen["tree"] = (await tools.execute(call("list_dir", path="."))).content
            return seen

    seen = anyio.run(main)
    assert seen["tree"] == "(empty)"  # the server runs, over its (empty) tree
    assert not any(SECRET in text for text in seen.values()), seen
    assert "cannot read" in seen[str(key)] and "cannot read" in seen[str(home / "notes.txt")]
    assert seen["home"] == "server.py"  # of the home folder, the jail holds the program file alone


def test_no_install_tree_that_is_or_holds_home_the_cache_or_the_working_folder_is_mounted(tmp_path: Path):
    from agentspec.mcp import _JailReads, _off_limits

    home, work = tmp_path / "home", tmp_path / "work"
    cache = home / ".cache" / "agentspec"
    tools = home / "bin" / "server"  # ~/bin/server: its tree would be $HOME
    venv = home / "venvs" / "mcp" / "bin" / "server"  # a venv of its own under $HOME: fine
    in_cache = cache / "bin" / "server"  # its tree would be the cache itself
    in_work = work / "server"  # a command in the working folder: its tree would be that folder
    for path in (tools, venv, in_cache, in_work):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
    reads = _JailReads(off_limits=[work, home, cache])
    for path in (tools, venv, in_cache, in_work):
        reads.add_executable(path)
    reads.add_tree(tmp_path)  # holds all three: refused
    bound = reads.binds()[2::3]
    assert sorted(bound) == sorted(map(str, [home / "venvs" / "mcp", tools, in_cache, in_work]))
    assert str(home) not in bound and str(cache) not in bound and str(work) not in bound
    # The real places: the working folder, $HOME and agentspec's cache.
    assert {Path.cwd(), Path.home()} <= set(_off_limits(Path.cwd()))


def test_program_file_is_the_interpreters_first_plain_argument(tmp_path: Path):
    from agentspec.mcp import _program_file

    (tmp_path / "server.py").write_text("")
    (tmp_path / "data.txt").write_text("")
    assert _program_file("/usr/bin/python3", ["-u", "server.py", "data.txt"], tmp_path) == (1, tmp_path / "server.py")
    assert _program_file("/x/bin/python3.11", ["-X", "dev", "server.py"], tmp_path) == (2, tmp_path / "server.py")
    assert _program_file("/usr/bin/node", [str(tmp_path / "server.py")], tmp_path) == (0, tmp_path / "server.py")
    assert _program_file("/usr/bin/python3", ["-m", "server", "data.txt"], tmp_path) is None
    assert _program_file("/usr/bin/python3", ["absent.py"], tmp_path) is None  # not this host's: the tree's
    assert _program_file("/usr/bin/mcp-server-filesystem", ["data.txt"], tmp_path) is None  # not an interpreter


def _installed_prefix(root: Path) -> Path:
    """A server installed under a prefix of its own (as under /opt/NAME): bin/files-server runs lib/files_server.py."""
    (root / "lib").mkdir(parents=True)
    (root / "bin").mkdir()
    shutil.copy(FILES, root / "lib" / "files_server.py")
    script = root / "bin" / "files-server"
    script.write_text(f"#!{sys.executable}\nimport os, runpy, sys\n"
                      "prefix = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n"
                      "sys.path.insert(0, os.path.join(prefix, 'lib'))\n"
                      "runpy.run_module('files_server', run_name='__main__')\n")
    script.chmod(0o755)
    return script


def test_server_installed_in_a_prefix_of_its_own_runs_jailed_from_anywhere(tmp_path: Path, home: Path):
    require_bwrap()
    script = _installed_prefix(tmp_path / "opt" / "files")
    source = tmp_path / "source"
    source.mkdir()
    (source / "in-tree.txt").write_text("tree")

    async def main() -> tuple[str, str, str]:
        async with MCPToolkit.stdio(str(script), sandbox="overlay", source=source) as tools:
            listed = (await tools.execute(call("list_dir"))).content
            box = await tools.fork(await tools.snapshot())
            wrote = (await box.execute(call("write_file", name="new.txt", text="x"))).content
            await tools.commit(box)
            return listed, wrote, (await tools.execute(call("list_dir"))).content

    assert anyio.run(main) == ("in-tree.txt", "wrote new.txt", "in-tree.txt\nnew.txt")


def test_relative_argument_is_the_servers_own_under_the_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``files_server.py .`` serves the tree, not the folder agentspec runs in (which has a '.' too)."""
    require_bwrap()
    source, host = tmp_path / "source", tmp_path / "host"
    source.mkdir()
    host.mkdir()
    (source / "in-tree.txt").write_text("tree")
    (host / "host-only.txt").write_text("host")
    shutil.copy(FILES, host / "server.py")  # run as `python server.py .` from the host folder
    monkeypatch.chdir(host)

    async def main() -> tuple[str, str]:
        async with MCPToolkit.stdio("python", "server.py", ".", sandbox="overlay", source=source) as tools:
            listed = (await tools.execute(call("list_dir"))).content
            box = await tools.fork(await tools.snapshot())
            await box.execute(call("write_file", name="dropped.txt", text="never"))
            in_fork = (await box.execute(call("list_dir"))).content
            await tools.discard(box)
            return listed, in_fork

    assert anyio.run(main) == ("in-tree.txt", "dropped.txt\nin-tree.txt")
    assert sorted(p.name for p in host.iterdir()) == ["host-only.txt", "server.py"]
    assert sorted(p.name for p in source.iterdir()) == ["in-tree.txt"]


def test_unconfined_discarded_fork_never_writes_the_host_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The same, unconfined (``confinement="none"``): the write of a discarded fork stays in the fork's tree."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "host-only.txt").write_text("host")
    monkeypatch.chdir(host)

    # The disk cap is a tmpfs only root may mount; elsewhere (CI's fresh Debian runs as a plain user) go without it.
    limits = Limits() if os.geteuid() == 0 else Limits(disk_bytes=None)

    async def main() -> tuple[str, str]:
        async with MCPToolkit.stdio("python", str(FILES), ".", sandbox="copy", confinement="none",
                                    limits=limits) as tools:
            assert isinstance(tools, MCPSandboxToolkit)
            box = await tools.fork(await tools.snapshot())
            await box.execute(call("write_file", name="dropped.txt", text="never"))
            in_fork = (await box.execute(call("list_dir"))).content
            await tools.discard(box)
            return in_fork, (await tools.execute(call("list_dir"))).content

    assert anyio.run(main) == ("dropped.txt", "(empty)")
    assert sorted(p.name for p in host.iterdir()) == ["host-only.txt"]


def test_docker_image_carries_only_the_program_file(tmp_path: Path):
    """The Docker variant: the interpreter's program file travels into the image; a data argument that happens to
    name a host file stays the server's own (relative to the container's workspace)."""
    import inspect

    from agentspec.mcp import _program_file
    from agentspec.mcp_docker import runtime_image

    (tmp_path / "server.py").write_text("")
    (tmp_path / "notes.db").write_text("")
    assert _program_file("python", ["server.py", "notes.db", "."], tmp_path) == (0, tmp_path / "server.py")
    assert _program_file("mcp-server-sqlite", ["notes.db"], tmp_path) is None
    assert "here" not in inspect.signature(runtime_image).parameters  # no argument is looked up on the host


def _real(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        reason = (f"{name} is not installed (pip install mcp-server-git / npm install -g "
                  "@modelcontextprotocol/server-filesystem, in a venv or prefix of its own)")
        if os.environ.get("AGENTSPEC_REQUIRE_MCP_SERVERS") == "1":  # .ci/run installs them: never skip there
            pytest.fail(f"{reason} [AGENTSPEC_REQUIRE_MCP_SERVERS=1: this test must run here]", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.mark.parametrize("server", ["mcp-server-filesystem", "mcp-server-git"])
def test_real_servers_in_their_own_install_trees_serve_the_tree(server: str, tmp_path: Path, home: Path):
    """Real servers from npm and PyPI, each installed in a tree of its own, run jailed from a home folder and
    serve the sandbox's tree given as '.'."""
    require_bwrap()
    command = _real(server)
    source = tmp_path / "source"
    source.mkdir()
    (source / "in-tree.txt").write_text("tree")
    if server == "mcp-server-git":
        import subprocess

        subprocess.run(["git", "init", "-q", str(source)], check=True)
        args, probe = ["--repository", "."], call("git_status", repo_path=".")
        expect = "in-tree.txt"
    else:
        args, probe = ["."], call("list_directory", path=".")
        expect = "[FILE] in-tree.txt"

    async def main() -> str:
        async with MCPToolkit.stdio(command, *args, sandbox="overlay", source=source) as tools:
            return (await tools.execute(probe)).content

    seen = anyio.run(main)
    assert expect in seen and "notes.txt" not in seen and SECRET not in seen
    assert sorted(os.listdir(home)) == [".cache", "notes.txt"]  # nothing written outside the tree
