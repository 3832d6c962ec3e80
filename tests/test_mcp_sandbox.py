"""A stdio MCP server inside an overlay sandbox: one copy per fork over its own tree, so its state-changing tools
run speculatively and reach the live tree only by commit."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from sandbox_support import require_bwrap
from test_mcp import NOTES, _Guesses, _Slow, call

from agentspec import Executor
from agentspec.mcp import MCPSandboxToolkit, MCPToolkit
from agentspec.types import Effect


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_bwrap()


def notes_in(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.glob("*.note"))}


def test_mutating_call_runs_in_a_fork_and_live_is_untouched_until_commit(tmp_path):
    (tmp_path / "old.note").write_text("from the source")

    async def main() -> None:
        async with MCPToolkit.stdio("python", NOTES, sandbox="overlay", source=tmp_path) as tools:
            assert isinstance(tools, MCPSandboxToolkit)
            # In a sandbox every state-changing tool is forkable: mutating, the unannotated one too.
            assert tools.effect("add_note") is Effect.MUTATING and tools.effect("delete_note") is Effect.MUTATING
            assert tools.effect("list_notes") is Effect.READ_ONLY
            assert tools.isolation["network"] == "none"
            box = await tools.fork(await tools.snapshot())
            assert (await box.execute(call("add_note", text="milk", name="new"))).content == "saved note new"
            assert (await box.execute(call("delete_note", name="old"))).content == "deleted note old"
            # The fork's server sees its own tree; live's server, and the live tree, are untouched.
            assert (await box.execute(call("list_notes"))).content == "new: milk"
            assert (await tools.execute(call("list_notes"))).content == "old: from the source"
            assert notes_in(tools.workdir) == {"old.note": "from the source"}
            dropped = await tools.fork(await tools.snapshot())
            await dropped.execute(call("add_note", text="never", name="gone"))
            await tools.discard(dropped)
            await tools.commit(box)
            assert notes_in(tools.workdir) == {"new.note": "milk"}
            assert (await tools.execute(call("list_notes"))).content == "new: milk"

    anyio.run(main)
    assert notes_in(tmp_path) == {"old.note": "from the source"}  # the source is never written


def test_sa_speculates_a_mutating_call_of_a_sandboxed_server(tmp_path):
    authority = _Slow([call("add_note", text="buy milk"), call("list_notes")], "1 note")
    speculator = _Guesses([call("add_note", text="buy milk"), call("list_notes")])

    async def main():
        async with MCPToolkit.stdio("python", NOTES, sandbox="overlay") as tools:
            result = await Executor(tools, authority=authority, speculator=speculator, mode="sa").run("note milk")
            return result, notes_in(tools.workdir)

    result, live = anyio.run(main)
    assert [step.call.name for step in result.steps] == ["add_note", "list_notes"]
    assert result.steps[0].source == "sa"  # executed in a fork by the speculator, committed on confirmation
    assert result.steps[1].observation.content == "note-1: buy milk"
    assert live == {"note-1.note": "buy milk"}


def test_cli_sandboxed_server_commits_speculated_writes(tmp_path, capsys):
    import json

    from agentspec.cli import main

    tasks = tmp_path / "tasks.jsonl"
    gold = [{"name": "add_note", "arguments": {"text": "buy milk"}}, {"name": "delete_note", "arguments": {"name": "note-1"}},
            {"name": "list_notes", "arguments": {}}, {"name": "done", "arguments": {"answer": "no notes"}}]
    tasks.write_text(json.dumps({"id": "milk", "task": "Write down 'buy milk', then delete it.", "answer": "no notes",
                                 "gold": gold}) + "\n")
    code = main(["run", "--json", "--bench", "mcp", "--mcp", f"python {NOTES}", "--mcp-sandbox", "overlay", "--tasks", str(tasks),
                 "--agent", "oracle", "--mode", "sa", "--speculator-model", "noisy-oracle:1.0", "--no-progress",
                 "--latency-model", "smc-paper"])  # simulated model time (trio's virtual clock), real server time
    captured = capsys.readouterr()
    assert code == 0, captured.err
    sa = json.loads(captured.out)["modes"]["sa"]
    assert sa["reward_mean"] == 1.0
    # Every state-changing call, the unannotated delete_note among them, ran in a fork and was committed from it.
    assert sa["commits_sa"] == 3 and sa["live_executions"] == 0
