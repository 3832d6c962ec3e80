"""MCP servers as toolkits, against real servers written with the SDK (tests/servers/): effects from annotations,
every failure one clear error observation, speculation only where it is safe."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from agentspec import Executor
from agentspec.errors import EnvError
from agentspec.mcp import MCPServer, MCPToolkit
from agentspec.runtime.policies.protocol import Decision
from agentspec.types import Effect, ToolCall

REPO = Path(__file__).resolve().parents[1]
NOTES = str(REPO / "tests" / "servers" / "notes_server.py")
FAULTY = str(REPO / "tests" / "servers" / "faulty_server.py")


def call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall(name=tool, arguments=arguments)


def test_stdio_notes_server_tools_effects_and_state(tmp_path):
    async def main() -> None:
        async with MCPToolkit.stdio("python", NOTES, str(tmp_path)) as tools:
            effects = {spec.name: spec.effect for spec in tools.tool_specs()}
            # Annotations are the server's word: untrusted, every tool is external, never run speculatively.
            assert effects == {"list_notes": Effect.EXTERNAL, "read_note": Effect.EXTERNAL,
                               "add_note": Effect.EXTERNAL, "delete_note": Effect.EXTERNAL}
            assert (await tools.execute(call("add_note", text="buy milk"))).content == "saved note note-1"
            assert (await tools.execute(call("list_notes"))).content == "note-1: buy milk"
            missing = await tools.execute(call("read_note", name="nope"))
            assert missing.error and missing.content.startswith("Error: ") and missing.content.endswith("no note 'nope'")
            unknown = await tools.execute(call("fly"))
            assert unknown.error and "unknown tool 'fly'" in unknown.content and "list_notes" in unknown.content

    anyio.run(main)
    assert (tmp_path / "note-1.note").read_text() == "buy milk"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_server(tmp_path):
    port = _free_port()
    server = subprocess.Popen([sys.executable, NOTES, str(tmp_path), "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not come up"
                time.sleep(0.1)

        async def main() -> None:
            async with MCPToolkit.http(f"http://127.0.0.1:{port}/mcp", trust_annotations=True) as tools:
                assert tools.effect("list_notes") is Effect.READ_ONLY and tools.effect("delete_note") is Effect.EXTERNAL
                await tools.execute(call("add_note", text="over http", name="web"))
                assert (await tools.execute(call("read_note", name="web"))).content == "over http"

        anyio.run(main)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert (tmp_path / "web.note").read_text() == "over http"


def test_hang_crash_and_malformed_each_give_one_clear_error(tmp_path):
    log = tmp_path / "calls.log"

    async def main() -> list[tuple[str, bool, str, float]]:
        seen = []
        async with MCPToolkit.stdio("python", FAULTY, env={"FAULTY_LOG": str(log)}, call_timeout_s=1.5) as tools:
            for name in ("ping", "hang", "ping", "crash", "ping", "malformed", "ping"):
                started = time.monotonic()
                observation = await tools.execute(call(name))
                seen.append((name, observation.error, observation.content, time.monotonic() - started))
        return seen

    seen = anyio.run(main)
    by_step = {i: (name, error, text) for i, (name, error, text, _) in enumerate(seen)}
    assert [error for _, error, _, _ in seen] == [False, True, False, True, False, True, False]
    assert all(text == "pong" for name, error, text in by_step.values() if name == "ping")
    assert "gave no answer to 'hang' within 1.5s" in by_step[1][2]
    assert seen[1][3] < 10  # the deadline, not the server, ends the call
    assert "exited during the call to 'crash'" in by_step[3][2]
    assert "malformed result" in by_step[5][2] and "'many' is not of type 'integer'" in by_step[5][2]
    assert all(text.startswith("Error: ") and "Traceback" not in text for _, error, text, _ in seen if error)
    # A hung or crashed server is replaced for the next call; a malformed answer keeps the same server.
    lines = log.read_text().split()
    assert lines.count("start") == 3


def test_a_server_that_does_not_start_is_one_clear_error(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys\nsys.stderr.write('no config file\\n')\nsys.exit(2)\n")

    async def main() -> None:
        async with MCPToolkit.stdio("python", str(script)):
            pass

    with pytest.raises(EnvError, match="did not start") as caught:
        anyio.run(main)
    assert "broken.py" in str(caught.value) and "the server wrote: no config file" in str(caught.value)


def test_server_needs_a_command_or_a_url():
    with pytest.raises(ValueError, match="exactly one"):
        MCPServer()
    assert MCPServer.of_command_line("python server.py 'a b'").args == ("server.py", "a b")


class _Slow:
    """An authority that makes ``calls`` in order, each after a pause (time for the speculator to run ahead)."""

    def __init__(self, calls: list[ToolCall], answer: str) -> None:
        self.calls, self.answer = calls, answer

    async def decide(self, history) -> Decision:
        await anyio.sleep(0.3)
        if len(history) < len(self.calls):
            return Decision(call=self.calls[len(history)])
        return Decision(call=None, final={"answer": self.answer})


class _Guesses:
    """A speculator that guesses ``guesses[len(history)]`` (and nothing past the end)."""

    def __init__(self, guesses: list[ToolCall]) -> None:
        self.guesses = guesses

    async def decide(self, history) -> Decision:
        guess = self.guesses[len(history)] if len(history) < len(self.guesses) else None
        return Decision(call=guess.model_copy(update={"id": f"g{len(history)}"}) if guess else None)


def test_read_only_tools_are_speculated_and_unannotated_ones_never(tmp_path):
    (tmp_path / "keep.note").write_text("precious")
    authority = _Slow([call("list_notes"), call("read_note", name="keep")], "1 note")
    # The speculator's second guess deletes the note: the MCP defaults make delete_note external, so it must
    # never run before the authority asks for it (which it never does).
    speculator = _Guesses([call("list_notes"), call("delete_note", name="keep"), call("read_note", name="keep")])

    async def main():
        async with MCPToolkit.stdio("python", NOTES, str(tmp_path), trust_annotations=True) as tools:
            # Trusted: the readOnlyHint tools are read-only; the additive and the unannotated ones stay external.
            assert {spec.name: spec.effect for spec in tools.tool_specs()} == {
                "list_notes": Effect.READ_ONLY, "read_note": Effect.READ_ONLY,
                "add_note": Effect.EXTERNAL, "delete_note": Effect.EXTERNAL}
            return await Executor(tools, authority=authority, speculator=speculator, mode="sa").run("read my notes")

    result = anyio.run(main)
    assert [step.call.name for step in result.steps] == ["list_notes", "read_note"]
    assert result.steps[0].source != "authority"  # the read-only call was answered from the speculator's fork
    assert all(step.observation.isolation == "trusted-annotations" for step in result.steps)
    assert result.steps[0].observation.content == "keep: precious"
    assert (tmp_path / "keep.note").read_text() == "precious"
    assert result.answer == "1 note"


def test_bench_tasks_file_is_checked(tmp_path):
    from envs.mcp.bench import read_tasks

    good = tmp_path / "tasks.jsonl"
    good.write_text(json.dumps({"task": "say hi", "answer": "hi"}) + "\n\n"
                    + json.dumps({"id": "b", "task": "list", "gold": [{"name": "list_notes"}]}) + "\n")
    tasks = read_tasks(good)
    assert [(t.id, t.answer, [c.name for c in t.gold]) for t in tasks] == [("task-1", "hi", []), ("b", None, ["list_notes"])]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "ok"}) + "\n" + json.dumps({"text": "no task key"}) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        read_tasks(bad)
