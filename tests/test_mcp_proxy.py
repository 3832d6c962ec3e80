"""``agentspec mcp-proxy`` (issue 40, item 2): a client sees through the proxy exactly what it sees directly, while
the proxy answers some read-only calls from results it pre-executed.

The differential tests replay one recorded session (reads, repeated reads, writes in between, a tool error)
directly against a server and through the proxy, each as an MCP client over stdio, and compare every reply.  The
reference filesystem and git servers run where installed (CI puts them on PATH; here they skip with the reason,
or fail under ``AGENTSPEC_REQUIRE_MCP_SERVERS=1``).  Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'agentspec[mcp]')")
from mcp import MCPError  # noqa: E402 - after the skip above
from test_mcp_jail import _real  # noqa: E402 - the reference servers, found (or skipped) one way

from agentspec.mcp_proxy.cache import PreExecutions, call_key  # noqa: E402
from agentspec.mcp_proxy.stats import ProxyStats  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SERVERS = REPO / "tests" / "servers"
FILES = SERVERS / "files_server.py"
SLOW_WRITER = SERVERS / "slow_writer.py"
FAULTY = SERVERS / "faulty_server.py"
Call = tuple[str, dict[str, Any]]
THINK_S = 0.12
"""Time between a reply and the next call (the client's model thinking): what the proxy pre-executes in."""


# --------------------------------------------------------------------------- clients


def proxy_command(*upstreams: str, flags: Sequence[str] = ()) -> list[str]:
    words = [sys.executable, "-m", "agentspec.cli", "mcp-proxy"]
    for line in upstreams:
        words += ["--upstream", line]
    return [*words, *flags]


def stdio(argv: Sequence[str]) -> mcp.StdioServerParameters:
    return mcp.StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(REPO),
                                     env={"PYTHONPATH": str(REPO)})


def server_line(*words: str | Path) -> str:
    """An ``--upstream`` value: one shell-quoted command line."""
    return shlex.join(str(word) for word in words)


async def _session_replies(session: mcp.ClientSession, calls: Sequence[Call], think_s: float,
                           timeout_s: float) -> list[Any]:
    listed = await session.list_tools()
    replies: list[Any] = [("tools", sorted((t.model_dump(mode="json", exclude_none=True) for t in listed.tools),
                                           key=lambda t: t["name"]))]
    for name, arguments in calls:
        try:
            result = await session.call_tool(name, arguments, read_timeout_seconds=timeout_s)
            replies.append(("result", name, result.model_dump(mode="json", by_alias=True)))
        except MCPError as exc:
            replies.append(("error", name, exc.code, exc.message))
        except Exception as exc:  # noqa: BLE001 - what the client raised is part of what it sees
            replies.append(("raised", name, type(exc).__name__, str(exc)))
        await anyio.sleep(think_s)
    return replies


def replay(argv: Sequence[str], calls: Sequence[Call], *, think_s: float = THINK_S, timeout_s: float = 30.0,
           errlog: Path | None = None) -> list[Any]:
    """Every reply a client gets for ``calls`` from the server ``argv`` starts (the tool list first)."""

    async def main() -> list[Any]:
        with open(errlog or os.devnull, "a", encoding="utf-8") as err:
            async with mcp.stdio_client(stdio(argv), errlog=err) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    return await _session_replies(session, calls, think_s, timeout_s)

    return anyio.run(main)


def stats_of(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- recorded sessions

FILES_SESSION: list[Call] = [
    ("list_dir", {}),
    ("write_file", {"name": "a.txt", "text": "alpha"}),
    ("read_path", {"path": "a.txt"}),
    ("list_dir", {}),
    ("read_path", {"path": "a.txt"}),
    ("write_file", {"name": "b.txt", "text": "beta"}),
    ("list_dir", {}),
    ("read_path", {"path": "b.txt"}),
    ("read_path", {"path": "a.txt"}),
    ("list_dir", {}),
    ("read_path", {"path": "a.txt"}),
    ("write_file", {"name": "a.txt", "text": "alpha, second"}),
    ("list_dir", {}),
    ("read_path", {"path": "a.txt"}),
    ("read_path", {"path": "missing.txt"}),  # a tool error, passed on as it came
    ("list_dir", {}),
    ("read_path", {"path": "a.txt"}),
    ("list_dir", {}),
    ("read_path", {"path": "b.txt"}),
    ("write_file", {"name": "b.txt", "text": "beta, second"}),
    ("list_dir", {}),
    ("read_path", {"path": "b.txt"}),
    ("list_dir", {}),
    ("read_path", {"path": "a.txt"}),
]


def fs_session(root: Path) -> list[Call]:
    """A session against the reference filesystem server over ``root``."""
    a, b, sub = str(root / "a.md"), str(root / "b.md"), str(root / "sub")
    return [
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": a}),
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": a}),
        ("write_file", {"path": b, "content": "# b\n"}),
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": b}),
        ("edit_file", {"path": a, "edits": [{"oldText": "one", "newText": "uno"}]}),
        ("read_text_file", {"path": a}),
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": a}),
        ("create_directory", {"path": sub}),
        ("directory_tree", {"path": str(root)}),
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": a}),
        ("search_files", {"path": str(root), "pattern": "*.md"}),
        ("read_text_file", {"path": str(root / "missing.md")}),
        ("list_directory", {"path": str(root)}),
        ("read_text_file", {"path": b}),
    ]


def git_session(repo: Path) -> list[Call]:
    """A session against the reference git server over ``repo``."""
    r = str(repo)
    return [
        ("git_status", {"repo_path": r}),
        ("git_log", {"repo_path": r, "max_count": 5}),
        ("git_status", {"repo_path": r}),
        ("git_diff_unstaged", {"repo_path": r}),
        ("git_add", {"repo_path": r, "files": ["notes.txt"]}),
        ("git_status", {"repo_path": r}),
        ("git_diff_staged", {"repo_path": r}),
        ("git_commit", {"repo_path": r, "message": "edit notes"}),
        ("git_status", {"repo_path": r}),
        ("git_log", {"repo_path": r, "max_count": 5}),
        ("git_status", {"repo_path": r}),
        ("git_branch", {"repo_path": r, "branch_type": "local"}),
        ("git_show", {"repo_path": r, "revision": "HEAD"}),
        ("git_status", {"repo_path": r}),
        ("git_log", {"repo_path": r, "max_count": 5}),
    ]


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def _git_template(path: Path) -> Path:
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Proxy Test")
    _git(path, "config", "user.email", "proxy@example.invalid")
    (path / "notes.txt").write_text("one\n")
    _git(path, "add", "notes.txt")
    _git(path, "commit", "-q", "-m", "first")
    (path / "notes.txt").write_text("one\ntwo\n")
    return path


def _reset(template: Path, live: Path) -> None:
    """``live`` as ``template`` is (the same path each run: the replies name it)."""
    if live.exists():
        shutil.rmtree(live)
    shutil.copytree(template, live, symlinks=True)


def _assert_same(direct: list[Any], proxied: list[Any]) -> None:
    assert len(direct) == len(proxied)
    for index, (want, got) in enumerate(zip(direct, proxied)):
        assert got == want, f"reply {index} differs"


# --------------------------------------------------------------------------- differential tests


def test_files_server_session_through_the_proxy_gets_every_reply_the_server_gives(tmp_path: Path):
    direct_root, proxy_root = tmp_path / "direct", tmp_path / "proxied"
    direct_root.mkdir()
    proxy_root.mkdir()
    stats = tmp_path / "stats.json"
    direct = replay([sys.executable, str(FILES), str(direct_root)], FILES_SESSION)
    proxied = replay(proxy_command(server_line("python", FILES, proxy_root),
                                   flags=["--trust-annotations", "--stats", str(stats)]), FILES_SESSION)
    _assert_same(direct, proxied)
    assert sorted(p.name for p in proxy_root.iterdir()) == sorted(p.name for p in direct_root.iterdir())
    counted = stats_of(stats)
    assert counted["calls"] == len(FILES_SESSION)
    assert counted["hits"] > 0, counted  # the comparison covered replies served from pre-executed results
    assert counted["hits"] + counted["forwarded"] == counted["calls"]


def test_reference_filesystem_server_session_is_identical_through_the_proxy(tmp_path: Path):
    server = _real("mcp-server-filesystem")
    template, live = tmp_path / "template", tmp_path / "live"
    template.mkdir()
    (template / "a.md").write_text("# a\none\ntwo\n")
    calls = fs_session(live)
    stats = tmp_path / "stats.json"
    _reset(template, live)
    direct = replay([server, str(live)], calls)
    _reset(template, live)
    proxied = replay(proxy_command(server_line(server, live), flags=["--trust-annotations", "--stats", str(stats)]),
                     calls)
    _assert_same(direct, proxied)
    counted = stats_of(stats)
    assert counted["hits"] > 0, counted


def test_reference_git_server_session_is_identical_through_the_proxy(tmp_path: Path):
    server = _real("mcp-server-git")
    template, live = _git_template(tmp_path / "template"), tmp_path / "live"
    calls = git_session(live)
    # Commits made by the server carry these dates (GitPython reads them), so both runs make the same hashes.
    line = server_line("env", "GIT_AUTHOR_DATE=2024-01-02T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-02T00:00:00Z",
                       server, "--repository", live)
    stats = tmp_path / "stats.json"
    _reset(template, live)
    direct = replay(["env", "GIT_AUTHOR_DATE=2024-01-02T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-02T00:00:00Z",
                     server, "--repository", str(live)], calls)
    _reset(template, live)
    proxied = replay(proxy_command(line, flags=["--trust-annotations", "--stats", str(stats)]), calls)
    _assert_same(direct, proxied)
    counted = stats_of(stats)
    assert counted["hits"] > 0, counted


def test_the_readmes_client_config_runs_the_proxy_over_a_git_repository(tmp_path: Path):
    """README's `mcpServers` config, as a desktop client would start it (from a repository's folder): the proxy
    serves the git server's tools and answers a status."""
    _real("mcp-server-git")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- config: mcp-proxy -->\n```json\n(.*?)```", text, re.S)
    assert found, "README lost its MCP client config"
    (server,) = json.loads(found.group(1))["mcpServers"].values()
    assert server["command"] == "agentspec"
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "notes.txt").write_text("hello")
    argv = [*proxy_command()[:-1], *server["args"]]  # `agentspec` is this interpreter's agentspec.cli

    async def main() -> str:
        params = mcp.StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(repo),
                                           env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")})
        with open(os.devnull, "w", encoding="utf-8") as err:
            async with mcp.stdio_client(params, errlog=err) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    assert "git_status" in {tool.name for tool in (await session.list_tools()).tools}
                    result = await session.call_tool("git_status", {"repo_path": str(repo)})
                    return str(result.content[0].text)  # type: ignore[union-attr]

    assert "notes.txt" in anyio.run(main)


# --------------------------------------------------------------------------- invalidation and safety


def test_a_write_drops_the_pre_executed_read_and_the_next_read_sees_the_new_state(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("old")
    stats = tmp_path / "stats.json"
    learn = [("list_dir", {}), ("read_path", {"path": "a.txt"})] * 4
    # After list_dir the speculator expects read a.txt and pre-executes it; the write comes instead.
    calls = [*learn, ("list_dir", {}), ("write_file", {"name": "a.txt", "text": "new"}),
             ("read_path", {"path": "a.txt"})]
    replies = replay(proxy_command(server_line("python", FILES, root),
                                   flags=["--trust-annotations", "--stats", str(stats)]), calls)
    last = replies[-1]
    assert last[0] == "result" and last[2]["content"][0]["text"] == "new"
    counted = stats_of(stats)
    assert counted["wasted_by"].get("invalidated", 0) >= 1, counted
    assert counted["hits"] >= 1, counted


def test_a_non_read_only_tool_is_never_pre_executed(tmp_path: Path):
    store = tmp_path / "store.txt"
    stats = tmp_path / "stats.json"
    calls: list[Call] = []
    for item in ("x", "x", "y", "x", "y", "x"):
        calls += [("append_item", {"item": item}), ("count_item", {"item": item})]
    writer = server_line("python", SLOW_WRITER, store, "--delay", "0.02")
    replies = replay(proxy_command(writer, flags=["--trust-annotations", "--stats", str(stats)]), calls)
    assert store.read_text().splitlines() == ["x", "x", "y", "x", "y", "x"]  # each append exactly once
    counts = [reply[2]["content"][0]["text"] for reply in replies if reply[1] == "count_item"]
    assert counts == ["x: 1", "x: 2", "y: 1", "x: 3", "y: 2", "x: 4"]  # every count after its append
    counted = stats_of(stats)
    assert counted["invalidations"] == 6


def test_untrusted_annotations_pre_execute_nothing_unless_declared_read_only(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a")
    calls = [("list_dir", {}), ("read_path", {"path": "a.txt"})] * 4
    plain, declared = tmp_path / "plain.json", tmp_path / "declared.json"
    line = server_line("python", FILES, root)
    replay(proxy_command(line, flags=["--stats", str(plain)]), calls)
    replay(proxy_command(line, flags=["--read-only", "read_path", "--stats", str(declared)]), calls)
    assert stats_of(plain)["pre_executed"] == 0 and stats_of(plain)["speculable_calls"] == 0
    counted = stats_of(declared)
    assert counted["speculable_calls"] == 4 and counted["pre_executed"] >= 1, counted
    assert counted["invalidations"] == 4  # list_dir is not trusted: each call of it drops the cache


# --------------------------------------------------------------------------- failures and bounds


FAULTY_CALLS: list[Call] = [("ping", {}), ("hang", {}), ("ping", {}), ("malformed", {}), ("crash", {}), ("ping", {}),
                            ("ping", {})]


def test_a_hanging_or_dying_upstream_gives_the_client_the_error_it_gets_directly(tmp_path: Path):
    direct = replay([sys.executable, str(FAULTY)], FAULTY_CALLS, think_s=0.0, timeout_s=1.5)
    proxied = replay(proxy_command(server_line("python", FAULTY)), FAULTY_CALLS, think_s=0.0, timeout_s=1.5)
    _assert_same(direct, proxied)
    kinds = [reply[0] if reply[0] != "error" else (reply[2], reply[3]) for reply in proxied[1:]]
    assert kinds == ["result", (-32001, "Request 'tools/call' timed out"), "result", "raised",
                     (-32000, "Connection closed"), (-32000, "Connection closed"), (-32000, "Connection closed")]


def test_a_result_run_ahead_is_not_served_once_its_upstream_has_died(tmp_path: Path):
    """ping is run ahead and kept; the upstream then dies (crash, which claims to be read-only, so nothing is
    dropped): the next ping gets ``Connection closed`` through the proxy as directly, not the kept pong."""
    calls: list[Call] = [("ping", {}), ("ping", {}), ("ping", {}), ("crash", {}), ("ping", {}), ("ping", {})]
    stats = tmp_path / "stats.json"
    direct = replay([sys.executable, str(FAULTY)], calls)
    proxied = replay(proxy_command(server_line("python", FAULTY), flags=["--trust-annotations", "--stats", str(stats)]),
                     calls)
    _assert_same(direct, proxied)
    assert [reply[2:] for reply in proxied[-2:]] == [(-32000, "Connection closed")] * 2
    assert stats_of(stats)["hits"] >= 1


def test_a_pre_execution_past_its_deadline_is_given_up(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    stats = tmp_path / "stats.json"
    calls: list[Call] = [("sleep", {"seconds": 0.6})] * 3
    replies = replay(proxy_command(server_line("python", FILES, root), flags=[
        "--read-only", "sleep", "--lookahead-timeout", "0.2", "--stats", str(stats)]), calls, think_s=0.4)
    assert all(reply[0] == "result" for reply in replies[1:])
    counted = stats_of(stats)
    assert counted["wasted_by"].get("timed-out", 0) >= 1, counted


def test_a_client_giving_up_on_a_joined_pre_execution_stops_it(tmp_path: Path):
    """The client's call joins a guess still running, then times out: the guess is cancelled with it, so the next
    write goes through at once instead of waiting for it."""
    root = tmp_path / "root"
    root.mkdir()
    stats = tmp_path / "stats.json"

    async def main() -> float:
        argv = proxy_command(server_line("python", FILES, root), flags=["--read-only", "sleep", "--stats", str(stats)])
        with open(os.devnull, "w") as quiet:
            async with mcp.stdio_client(stdio(argv), errlog=quiet) as (read, write):
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("sleep", {"seconds": 3})  # forwarded; then sleep(3) is guessed
                    await anyio.sleep(0.3)  # the guess starts
                    with pytest.raises(MCPError, match="timed out"):  # joins the guess, gives up after 0.5 s
                        await session.call_tool("sleep", {"seconds": 3}, read_timeout_seconds=0.5)
                    started = time.monotonic()
                    await session.call_tool("write_file", {"name": "a.txt", "text": "a"})
                    return time.monotonic() - started

    assert anyio.run(main) < 1.5
    counted = stats_of(stats)
    assert counted["hits"] == 0 and counted["wasted_by"].get("abandoned") == 1, counted


def test_no_room_means_plain_forwarding(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a")
    calls = [("list_dir", {}), ("read_path", {"path": "a.txt"})] * 3
    none, tiny = tmp_path / "none.json", tmp_path / "tiny.json"
    line = server_line("python", FILES, root)
    replay(proxy_command(line, flags=["--trust-annotations", "--max-inflight", "0", "--stats", str(none)]), calls)
    replay(proxy_command(line, flags=["--trust-annotations", "--max-cache-bytes", "0", "--stats", str(tiny)]), calls)
    assert stats_of(none)["pre_executed"] == 0 and stats_of(none)["forwarded"] == len(calls)
    counted = stats_of(tiny)
    assert counted["pre_executed"] >= 1 and counted["cache_bytes_peak"] == 0, counted
    assert counted["wasted"] == counted["pre_executed"] - counted["hits"], counted


def test_cache_bounds_in_flight_bytes_and_age():
    async def main() -> None:
        stats = ProxyStats()
        cache = PreExecutions(stats, max_inflight=1, max_bytes=400, max_age_s=60)
        from mcp import types

        def result(text: str) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        a, b, c = call_key("read", {"p": "a"}), call_key("read", {"p": "b"}), call_key("read", {"p": "c"})
        assert call_key("read", {"x": 1, "y": 2}) == call_key("read", {"y": 2, "x": 1})
        assert cache.may_start(a)
        first = cache.start(a)
        assert not cache.may_start(b) and stats.skipped_full == 1  # one in flight at most
        cache.finish(first, result("x" * 200), 0.1)
        assert cache.may_start(b)
        cache.finish(cache.start(b), result("y" * 200), 0.1)  # over 400 bytes together: the oldest goes
        assert a not in cache.entries and b in cache.entries and stats.wasted_by == {"evicted": 1}
        cache.finish(cache.start(c), result("z" * 1000), 0.1)  # alone over the bound: never kept
        assert stats.wasted_by["too-big"] == 1
        served = cache.claim(b)
        assert served is not None and served.result is not None and cache.claim(b) is None  # one call each
        old = cache.start(a)
        cache.finish(old, result("a"), 0.1)
        old.finished -= 61
        assert cache.claim(a) is None and stats.wasted_by["expired"] == 1
        cache.finish(cache.start(a), result("a"), 0.1)
        cache.begin_write()
        assert cache.claim(a) is None and stats.wasted_by["invalidated"] == 1
        assert not cache.may_start(a)  # nothing starts while a write is in flight
        cache.end_write()
        assert cache.may_start(a)

    anyio.run(main)


# --------------------------------------------------------------------------- names, HTTP, stats, command line


def test_clashing_tool_names_are_prefixed_and_said(tmp_path: Path):
    one, two = tmp_path / "one", tmp_path / "two"
    for root, text in ((one, "from one"), (two, "from two")):
        root.mkdir()
        (root / "a.txt").write_text(text)
    errlog = tmp_path / "stderr.txt"
    replies = replay(proxy_command(server_line("python", FILES, one), server_line("python", FILES, two)),
                     [("files__read_path", {"path": "a.txt"}), ("files-2__read_path", {"path": "a.txt"}),
                      ("read_path", {"path": "a.txt"})], errlog=errlog)
    names = [tool["name"] for tool in replies[0][1]]
    assert "files__read_path" in names and "files-2__read_path" in names and "read_path" not in names
    assert replies[1][2]["content"][0]["text"] == "from one" and replies[2][2]["content"][0]["text"] == "from two"
    assert replies[3][:3] == ("error", "read_path", -32602)
    assert "tool 'read_path' is offered by 2 upstreams: the client sees it as files__read_path, " \
           "files-2__read_path" in errlog.read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_http_transport_serves_on_localhost_and_writes_stats_on_sigterm(tmp_path: Path):
    from mcp.client.streamable_http import streamable_http_client

    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("over http")
    port, stats = _free_port(), tmp_path / "stats.json"
    argv = proxy_command(server_line("python", FILES, root),
                         flags=["--transport", "http", "--port", str(port), "--stats", str(stats)])
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    async def main() -> str:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                await anyio.sleep(0.1)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_):
            async with mcp.ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("read_path", {"path": "a.txt"})
                return str(result.content[0].text)  # type: ignore[union-attr]

    try:
        assert anyio.run(main) == "over http"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert out == b""  # stdout is nobody's channel here, and never the summary's
    assert stats_of(stats)["calls"] == 1
    assert b"agentspec mcp-proxy: 1 calls" in err


def test_stats_file_and_stderr_line(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a")
    stats, errlog = tmp_path / "stats.json", tmp_path / "stderr.txt"
    calls = [("list_dir", {}), ("read_path", {"path": "a.txt"})] * 4 + [("write_file", {"name": "b", "text": "b"})]
    replay(proxy_command(server_line("python", FILES, root), flags=["--trust-annotations", "--stats", str(stats)]),
           calls, errlog=errlog)
    counted = stats_of(stats)
    assert set(counted) >= {"calls", "forwarded", "hits", "joined", "pre_executed", "wasted", "wasted_by",
                            "time_saved_s", "upstream_s", "pre_executed_s", "invalidations", "hit_rate",
                            "write_wait_s", "cache_bytes_peak", "speculable_calls"}
    assert counted["calls"] == 9 and counted["speculable_calls"] == 8 and counted["invalidations"] == 1
    assert counted["hits"] + counted["forwarded"] == 9
    assert counted["wasted"] == sum(counted["wasted_by"].values())
    assert counted["pre_executed"] >= counted["hits"] - counted["joined"]
    assert counted["hits"] == 0 or counted["time_saved_s"] > 0
    assert counted["hit_rate"] == round(counted["hits"] / 8, 4)
    line = next(text for text in errlog.read_text().splitlines() if text.startswith("agentspec mcp-proxy: "))
    assert f"{counted['hits']} hits of 8 read-only" in line


@pytest.mark.parametrize(("flags", "message"), [
    ([], "give at least one --upstream"),
    (["--upstream-url", "ftp://x"], "give an http:// or https:// URL"),
    (["--upstream", "python x.py", "--port", "9000"], "--port applies to --transport http"),
    (["--upstream", "no-such-mcp-server-command"], "not found on PATH"),
    (["--upstream", f"python {FILES}", "--read-only", "no_such_tool"], "--read-only no_such_tool: no upstream"),
    (["--upstream", "python x.py", "--max-inflight", "-1"], "must be an integer >= 0"),
])
def test_bad_input_is_one_line_and_exit_2(flags: list[str], message: str, tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "agentspec.cli", "mcp-proxy", *flags], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert done.stdout == ""


# --------------------------------------------------------------------------- resources and prompts

NOTES = SERVERS / "notes_server.py"


def _catalog_session(argv: Sequence[str]) -> list[Any]:
    """What a client sees of a server's resources and prompts, around a write it makes through a tool."""

    async def main() -> list[Any]:
        with open(os.devnull, "w", encoding="utf-8") as err:
            return await talk(err)

    async def talk(err: Any) -> list[Any]:
        async with mcp.stdio_client(stdio(argv), errlog=err) as (read, write):
            async with mcp.ClientSession(read, write) as session:
                init = await session.initialize()
                seen: list[Any] = [("capabilities", bool(init.capabilities.resources), bool(init.capabilities.prompts))]

                async def step(label: str, request: Any) -> None:
                    try:
                        seen.append((label, (await request).model_dump(mode="json", by_alias=True, exclude_none=True)))
                    except MCPError as exc:
                        seen.append((label, "error", exc.code, exc.message))

                await step("resources", session.list_resources())
                await step("templates", session.list_resource_templates())
                await step("index", session.read_resource("notes://index"))
                await session.call_tool("add_note", {"text": "buy milk", "name": "milk"})
                await step("index after a write", session.read_resource("notes://index"))
                await step("one note", session.read_resource("notes://note/milk"))
                await step("a note that is not there", session.read_resource("notes://note/nope"))
                await step("prompts", session.list_prompts())
                await step("prompt", session.get_prompt("review_notes", {"focus": "shopping"}))
                await step("unknown prompt", session.get_prompt("nope", {}))
                return seen

    return anyio.run(main)


def test_resources_and_prompts_reach_the_client_as_the_upstream_offers_them(tmp_path: Path) -> None:
    direct = _catalog_session([sys.executable, str(NOTES), str(tmp_path / "direct")])
    proxied = _catalog_session(proxy_command(server_line(sys.executable, NOTES, tmp_path / "proxied"),
                                             flags=["--read-only", "list_notes"]))
    assert direct[0] == ("capabilities", True, True)
    assert dict((s[0], s[1:]) for s in proxied) == dict((s[0], s[1:]) for s in direct)
    assert "buy milk" in json.dumps(dict(s[:2] for s in proxied)["one note"])


def test_with_two_upstreams_each_resource_and_prompt_goes_to_its_owner(tmp_path: Path) -> None:
    # files_server declares resources and prompts but has none; the notes server has both.
    async def main(argv: Sequence[str]) -> list[Any]:
        with open(os.devnull, "w", encoding="utf-8") as err:
            async with mcp.stdio_client(stdio(argv), errlog=err) as (read, write), mcp.ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("add_note", {"text": "buy milk", "name": "milk"})
                seen: list[Any] = [
                    [str(r.uri) for r in (await session.list_resources()).resources],
                    (await session.read_resource("notes://note/milk")).model_dump(mode="json"),
                    [p.name for p in (await session.list_prompts()).prompts],
                ]
                try:
                    await session.read_resource("other://nowhere")
                except MCPError as exc:
                    seen.append((exc.code, exc.message))
                return seen

    both = proxy_command(server_line(sys.executable, FILES, tmp_path / "files"),
                         server_line(sys.executable, NOTES, tmp_path / "notes"))
    listed, note, prompts, unknown = anyio.run(main, both)
    direct = anyio.run(main, [sys.executable, str(NOTES), str(tmp_path / "direct")])
    assert listed == direct[0] == ["notes://index"] and note == direct[1] and prompts == ["review_notes"]
    assert unknown == (-32002, "Resource not found: other://nowhere")  # two upstreams offer resources: none owns it
