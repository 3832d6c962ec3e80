"""An MCP client session replayed directly and through ``agentspec mcp-proxy``, against the reference filesystem and
git servers, with 0 ms and 200 ms added tool latency: hit rate, latency saved, identical replies (issue 40).

Each session is a scripted list of calls in a coding assistant's habits (explore, read, edit, read back, list
again; for git: status, diff, add, status, staged diff, commit, log, a few times over), replayed by an MCP client
over stdio with ``--think-ms`` between a reply and the next call (the client's model at work: what the proxy
pre-executes in).  The latency is added by ``experiments/mcp_delay.py``, a forwarding server that waits
``--delay-ms`` before each call; it fronts the server in the direct run and in the proxied one alike.  Both runs
start from the same files at the same path (the replies name it) and git commits carry fixed dates, so every reply
can be compared.

    python experiments/mcp_proxy.py                     # servers found on PATH, or --fs-server/--git-server

The proxy runs with ``--trust-annotations`` (both servers annotate their read-only tools) and its defaults
(online speculator from nothing, 2 pre-executions in flight).  The last stdout line is JSON: per server and
delay, the calls, read-only calls, hits, pre-executed and wasted calls, the client's total wait for tool replies
directly and through the proxy, what that saved, the proxy's own count of upstream time saved, and whether every
reply was identical.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import MCPError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DELAY = HERE / "mcp_delay.py"
Call = tuple[str, dict[str, Any]]
DATES = ["GIT_AUTHOR_DATE=2024-01-02T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-02T00:00:00Z"]
READ_ONLY = {
    "filesystem": {"read_text_file", "list_directory", "directory_tree", "search_files", "read_multiple_files",
                   "list_allowed_directories"},
    "git": {"git_status", "git_diff_unstaged", "git_diff_staged", "git_log", "git_show", "git_branch"},
}


# --------------------------------------------------------------------------- the sessions and their starting state


def fs_files(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "README.md").write_text("# demo\n\nA small package.\n")
    (root / "src" / "app.py").write_text("from util import add\n\n\ndef main():\n    print(add(1, 2))\n")
    (root / "src" / "util.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_app.py").write_text("from util import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")


def fs_session(root: Path) -> list[Call]:
    r = str(root)
    app, util, readme, test = (str(root / p) for p in ("src/app.py", "src/util.py", "README.md", "tests/test_app.py"))
    new_test = str(root / "tests" / "test_util.py")
    return [
        ("list_allowed_directories", {}),
        ("directory_tree", {"path": r}),
        ("read_text_file", {"path": readme}),
        ("list_directory", {"path": str(root / "src")}),
        ("read_text_file", {"path": app}),
        ("read_text_file", {"path": util}),
        ("search_files", {"path": r, "pattern": "*.py"}),
        ("read_text_file", {"path": test}),
        ("edit_file", {"path": util, "edits": [{"oldText": "a - b", "newText": "a + b"}]}),
        ("read_text_file", {"path": util}),
        ("list_directory", {"path": str(root / "src")}),
        ("read_text_file", {"path": app}),
        ("edit_file", {"path": app, "edits": [{"oldText": "add(1, 2)", "newText": "add(2, 3)"}]}),
        ("read_text_file", {"path": app}),
        ("list_directory", {"path": str(root / "src")}),
        ("write_file", {"path": new_test, "content": "from util import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"}),
        ("read_text_file", {"path": new_test}),
        ("list_directory", {"path": str(root / "tests")}),
        ("directory_tree", {"path": r}),
        ("read_text_file", {"path": readme}),
        ("edit_file", {"path": readme, "edits": [{"oldText": "A small package.", "newText": "A small package that adds."}]}),
        ("read_text_file", {"path": readme}),
        ("list_directory", {"path": r}),
        ("read_multiple_files", {"paths": [app, util]}),
        ("search_files", {"path": r, "pattern": "*.md"}),
        ("read_text_file", {"path": util}),
        ("edit_file", {"path": util, "edits": [{"oldText": "return a + b", "newText": "return int(a) + int(b)"}]}),
        ("read_text_file", {"path": util}),
        ("list_directory", {"path": str(root / "src")}),
        ("read_text_file", {"path": test}),
        ("directory_tree", {"path": r}),
    ]


def git_files(root: Path) -> None:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "Experiment")
    _git(root, "config", "user.email", "experiment@example.invalid")
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (root / name).write_text(f"{name}\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "start")
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (root / name).write_text(f"{name}\nchanged\n")


def git_session(root: Path) -> list[Call]:
    r = str(root)
    calls: list[Call] = [("git_branch", {"repo_path": r, "branch_type": "local"})]
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        calls += [
            ("git_status", {"repo_path": r}),
            ("git_diff_unstaged", {"repo_path": r}),
            ("git_add", {"repo_path": r, "files": [name]}),
            ("git_status", {"repo_path": r}),
            ("git_diff_staged", {"repo_path": r}),
            ("git_commit", {"repo_path": r, "message": f"update {name}"}),
            ("git_log", {"repo_path": r, "max_count": 3}),
        ]
    return [*calls, ("git_show", {"repo_path": r, "revision": "HEAD"}), ("git_status", {"repo_path": r})]


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


# --------------------------------------------------------------------------- one replay


async def _replay(argv: Sequence[str], calls: Sequence[Call], think_s: float) -> tuple[list[Any], list[float]]:
    params = mcp.StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(REPO),
                                       env={"PYTHONPATH": str(REPO)})
    replies: list[Any] = []
    waits: list[float] = []
    with open(os.devnull, "w") as quiet:
        async with mcp.stdio_client(params, errlog=quiet) as (read, write):
            async with mcp.ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                for name, arguments in calls:
                    await anyio.sleep(think_s)
                    started = time.perf_counter()
                    try:
                        result = await session.call_tool(name, arguments, read_timeout_seconds=60)
                        replies.append(result.model_dump(mode="json", by_alias=True))
                    except MCPError as exc:
                        replies.append(["error", exc.code, exc.message])
                    waits.append(time.perf_counter() - started)
    return replies, waits


def measure(server: str, command: list[str], prepare: Callable[[Path], None], session: Callable[[Path], list[Call]],
            delay_ms: float, think_s: float) -> dict[str, Any]:
    """The session directly and through the proxy, from the same starting state: one row of the table."""
    delayed = [sys.executable, str(DELAY), "--delay-ms", f"{delay_ms:g}", "--", *command]
    with tempfile.TemporaryDirectory(prefix="mcp-proxy-exp-") as scratch:
        template, live, stats = Path(scratch) / "template", Path(scratch) / "live", Path(scratch) / "stats.json"
        prepare(template)
        calls = session(live)
        argv = [word.replace("{ROOT}", str(live)) for word in delayed]
        runs = {}
        for way in ("direct", "proxy"):
            if live.exists():
                shutil.rmtree(live)
            shutil.copytree(template, live, symlinks=True)
            if way == "proxy":
                argv_way = [sys.executable, "-m", "agentspec.cli", "mcp-proxy", "--upstream", shlex.join(argv),
                            "--trust-annotations", "--stats", str(stats)]
            else:
                argv_way = argv
            runs[way] = anyio.run(_replay, argv_way, calls, think_s)
        counted = json.loads(stats.read_text())
    (direct, direct_waits), (proxied, proxy_waits) = runs["direct"], runs["proxy"]
    differing = [index for index, (a, b) in enumerate(zip(direct, proxied)) if a != b]
    read_only = sum(1 for name, _ in calls if name in READ_ONLY[server])
    return {
        "server": server, "delay_ms": delay_ms, "calls": len(calls), "read_only_calls": read_only,
        "hits": counted["hits"], "joined": counted["joined"], "hit_rate": round(counted["hits"] / read_only, 3),
        "pre_executed": counted["pre_executed"], "wasted": counted["wasted"], "wasted_by": counted["wasted_by"],
        "wait_direct_s": round(sum(direct_waits), 3), "wait_proxy_s": round(sum(proxy_waits), 3),
        "saved_s": round(sum(direct_waits) - sum(proxy_waits), 3),
        "saved_pct": round(100 * (1 - sum(proxy_waits) / sum(direct_waits)), 1),
        "proxy_time_saved_s": counted["time_saved_s"], "write_wait_s": counted["write_wait_s"],
        "identical": not differing and len(direct) == len(proxied), "differing": differing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fs-server", default=shutil.which("mcp-server-filesystem"), help="mcp-server-filesystem")
    parser.add_argument("--git-server", default=shutil.which("mcp-server-git"), help="mcp-server-git")
    parser.add_argument("--delays-ms", type=float, nargs="+", default=[0.0, 200.0])
    parser.add_argument("--think-ms", type=float, default=300.0, help="between a reply and the next call")
    args = parser.parse_args()
    if not args.fs_server or not args.git_server:
        parser.error("the reference servers are not on PATH: give --fs-server and --git-server")
    setups = [
        ("filesystem", [args.fs_server, "{ROOT}"], fs_files, fs_session),
        ("git", ["env", *DATES, args.git_server, "--repository", "{ROOT}"], git_files, git_session),
    ]
    rows = [measure(server, command, prepare, session, delay, args.think_ms / 1000)
            for server, command, prepare, session in setups for delay in args.delays_ms]
    for row in rows:
        print(f"{row['server']:10} {row['delay_ms']:5g} ms: {row['hits']}/{row['read_only_calls']} hits, "
              f"waited {row['wait_direct_s']:.3f}s direct, {row['wait_proxy_s']:.3f}s proxied "
              f"({row['saved_pct']:+.1f}% saved), identical={row['identical']}", file=sys.stderr)
    print(json.dumps({"think_ms": args.think_ms, "runs": rows}))


if __name__ == "__main__":
    main()
