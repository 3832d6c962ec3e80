"""``agentspec run --bench mcp`` end to end, with a scripted OpenAI-compatible endpoint as the agent (the MCP example
of docs/api.md runs in tests/test_readme_example.py)."""

from __future__ import annotations

import json
from pathlib import Path

from scripted_openai_server import ScriptedOpenAIServer
from test_mcp import NOTES

from agentspec.cli import main

REPO = Path(__file__).resolve().parents[1]
PLAN = [
    {"name": "add_note", "arguments": {"text": "buy milk"}},
    {"name": "list_notes", "arguments": {}},
    {"name": "done", "arguments": {"answer": "1 note"}},
]


def responder(request):
    """Add the note, list the notes, answer (the authority takes a moment, so a speculator can run ahead)."""
    done = sum(1 for m in request["messages"] if m["role"] == "tool")
    reply = {"tool_calls": [PLAN[min(done, 2)]]}
    if request["model"] == "authority":
        reply["delay_s"] = 0.2
    return reply


def test_cli_runs_the_mcp_bench_end_to_end(tmp_path, capsys):
    notes, out = tmp_path / "notes", tmp_path / "out"
    with ScriptedOpenAIServer(responder, models=("authority",)) as srv:
        code = main(["run", "--json", "--bench", "mcp", "--mcp", f"python {NOTES} {notes}",
                     "--task", "Write down 'buy milk', then tell me how many notes there are.",
                     "--agent-model", f"{srv.base_url}#authority", "--out", str(out), "--no-progress"])
        requests = list(srv.requests)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["bench"] == "mcp" and summary["modes"]["sequential"]["reward_mean"] == 1.0
    assert {tool["function"]["name"] for tool in requests[0]["tools"]} == {
        "list_notes", "read_note", "add_note", "delete_note", "done"}
    assert "buy milk" in requests[0]["messages"][0]["content"]
    assert (notes / "note-1.note").read_text() == "buy milk"
    episode = json.loads((out / "results.json").read_text())
    assert "note-1: buy milk" in json.dumps(episode)


def test_mcp_flags_are_checked(tmp_path, capsys):
    assert main(["run", "--bench", "workspace-demo", "--mcp", f"python {NOTES}", "--agent", "oracle",
                 "--no-progress"]) != 0
    assert "--mcp: only for --bench mcp" in capsys.readouterr().err
    assert main(["run", "--bench", "mcp", "--mcp", f"python {NOTES} {tmp_path}", "--agent", "oracle",
                 "--no-progress"]) != 0
    assert "--task TEXT or --tasks FILE.jsonl" in capsys.readouterr().err
