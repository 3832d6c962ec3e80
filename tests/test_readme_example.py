"""The README's Python API example runs as written, against a local OpenAI-compatible server."""

from __future__ import annotations

import re
from pathlib import Path

from scripted_openai_server import ScriptedOpenAIServer

README = Path(__file__).resolve().parents[1] / "README.md"


def example_code() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- example: executor -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README lost its executor example"
    return match.group(1)


def responder(request):
    """Scripted authority and speculator: add the note, list notes, answer."""
    done = sum(1 for m in request["messages"] if m["role"] == "tool")
    plan = [
        {"name": "add_note", "arguments": {"text": "buy milk"}},
        {"name": "list_notes", "arguments": {}},
        {"name": "done", "arguments": {"answer": "1 note"}},
    ]
    reply = {"tool_calls": [plan[min(done, 2)]]}
    if request["model"] == "authority":
        reply["delay_s"] = 0.2
    return reply


def test_readme_example_runs(monkeypatch, capsys):
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        monkeypatch.setenv("AGENTSPEC_AGENT_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_AGENT_MODEL", "authority")
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_MODEL", "speculator")
        exec(compile(example_code(), "README.md", "exec"), {"__name__": "readme_example"})
        tools_sent = {t["function"]["name"] for t in srv.requests[0]["tools"]}
    out = capsys.readouterr().out
    assert out.strip() == "1 note ['sa', 'sa'] ['buy milk']"
    assert tools_sent == {"add_note", "list_notes", "done"}
