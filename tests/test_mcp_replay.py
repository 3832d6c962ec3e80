"""Mining and fitting on an MCP bench (issue 37, items 4 and 6): they replay the tasks' gold calls, so a server
outside a sandbox is refused with one line before any call runs on it; a sandboxed one runs in thrown-away trees
(closing its toolkits from other tasks than opened them), and a slow tool costs one look-ahead deadline, not one
per probe.  Without bubblewrap a sandboxed server is the one-line "not installed" error, not a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from sandbox_support import require_bwrap
from test_mcp import FAULTY, NOTES

from agentspec.cli import main
from agentspec.errors import SnapshotError
from agentspec.mcp import MCPToolkit
from agentspec.types import ToolCall

GOLD = [{"name": "add_note", "arguments": {"text": "milk"}}, {"name": "list_notes", "arguments": {}},
        {"name": "done", "arguments": {"answer": "1 note"}}]


def _tasks(path: Path, gold: list[dict[str, object]] = GOLD, count: int = 2) -> Path:
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"Write down milk ({i})", "gold": gold}) + "\n"
                            for i in range(count)))
    return path


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("agentspec: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", [
    ["mine", "--speculator-model", "noisy-oracle:0.8", "--no-progress"],
    ["speculator", "fit"],
    ["speculator", "score", "--folds", "2"],
])
def test_replaying_commands_refuse_a_server_outside_a_sandbox(command: list[str], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    notes = tmp_path / "notes"
    notes.mkdir()
    out = ["--out", str(tmp_path / "out.json")] if command[-1] != "2" else []
    code = main([*command, "--bench", "mcp", "--bench-option", f"mcp=python {NOTES} {notes}",
                 "--bench-option", f"tasks={_tasks(tmp_path / 'tasks.jsonl')}", "--split", "all", *out])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "replays the tasks' gold calls" in line and "sandbox=overlay" in line
    assert list(notes.iterdir()) == []  # the live server's state was never touched


def test_mine_runs_a_sandboxed_server_in_thrown_away_trees(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    require_bwrap()
    source = tmp_path / "source"
    source.mkdir()
    (source / "old.note").write_text("kept")
    out = tmp_path / "macros.json"
    code = main(["mine", "--bench", "mcp", "--bench-option", f"mcp=python {NOTES}", "--bench-option", "sandbox=overlay",
                 "--bench-option", f"source={source}", "--bench-option", f"tasks={_tasks(tmp_path / 'tasks.jsonl')}",
                 "--split", "all", "--speculator-model", "noisy-oracle:0.8", "--samples", "2", "--no-progress",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out.splitlines()[-1])["trajectories"]["gold"] == 2
    assert out.is_file()
    assert sorted(p.name for p in source.iterdir()) == ["old.note"]  # the source is never written


def test_toolkit_opened_in_one_task_closes_in_another(tmp_path: Path):
    """What mining does (its replays open backends in sample tasks and close them at the end, in the main task)."""
    opened: list[MCPToolkit] = []

    async def open_one() -> None:
        toolkit = MCPToolkit.stdio("python", NOTES, str(tmp_path))
        await toolkit.start()
        opened.append(toolkit)  # type: ignore[arg-type]

    async def main_task() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(open_one)
        with anyio.CancelScope(shield=True):  # and inside a scope of its own, as mining's close runs
            await opened[0].close()

    anyio.run(main_task)
    anyio.run(main_task, backend="trio")


def test_sandbox_without_bubblewrap_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]):
    import agentspec.sandbox.confinement as host

    monkeypatch.setattr(host, "find_bwrap", lambda: None)

    async def start() -> None:
        async with MCPToolkit.stdio("python", NOTES, sandbox="overlay"):
            pass

    with pytest.raises(SnapshotError, match="bubblewrap"):
        anyio.run(start)
    code = main(["run", "--bench", "mcp", "--mcp", f"python {NOTES}", "--mcp-sandbox", "overlay", "--task", "note milk",
                 "--agent", "oracle", "--no-progress"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "bubblewrap (bwrap) is not installed" in line


@pytest.mark.timeout(180)
def test_fit_on_a_sandboxed_server_with_a_hanging_tool_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`hang` (read-only, no arguments) is a probe at every state of every task: before, each probe waited out the
    60 s call deadline (two tasks: 6 probes, 6 minutes, no output).  Now a call in a fork has the look-ahead
    deadline, and a tool that ran past it is not run in a fork again (what is left is the servers' starts: `crash`
    is a probe too)."""
    require_bwrap()
    gold = [{"name": "ping", "arguments": {}}, {"name": "done", "arguments": {"answer": "pong"}}]
    started = time.monotonic()
    code = main(["speculator", "fit", "--bench", "mcp", "--bench-option", f"mcp=python {FAULTY}",
                 "--bench-option", "sandbox=overlay", "--bench-option", "lookahead_timeout_s=2",
                 "--bench-option", f"tasks={_tasks(tmp_path / 'tasks.jsonl', gold)}", "--split", "all",
                 "--out", str(tmp_path / "spec.json")])
    elapsed = time.monotonic() - started
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out.splitlines()[-1])["trajectories"] == 2
    assert elapsed < 90, f"fit took {elapsed:.0f}s"


def test_a_read_only_call_in_a_fork_that_runs_past_the_lookahead_deadline_is_not_run_in_forks_again():
    require_bwrap()
    slow: set[str] = set()

    async def main() -> tuple[list[str], float, float]:
        async with MCPToolkit.stdio("python", FAULTY, sandbox="overlay", lookahead_timeout_s=1.0,
                                    slow_tools=slow) as tools:
            box = await tools.fork(await tools.snapshot())
            started = anyio.current_time()
            first = await box.execute(ToolCall(name="hang"))
            took = anyio.current_time() - started
            again = await tools.fork(await tools.snapshot())
            started = anyio.current_time()
            second = await again.execute(ToolCall(name="hang"))
            skipped = anyio.current_time() - started
            live = await tools.execute(ToolCall(name="ping"))  # live calls are never bounded or skipped
            return [first.content, second.content, live.content], took, skipped

    (first, second, live), took, skipped = anyio.run(main)
    assert "gave no answer to 'hang' within 1s" in first and took < 10
    assert "not run in a fork: 'hang' ran past the 1s look-ahead deadline earlier" in second and skipped < 0.5
    assert live == "pong" and slow == {"hang"}
