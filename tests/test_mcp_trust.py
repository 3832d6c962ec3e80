"""Annotations are a server's word about itself (issue 37, item 3): outside a sandbox, a tool that claims
``readOnlyHint`` runs speculatively only when the user trusts the server, and every result then says so."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from test_mcp import call

from agentspec import Executor
from agentspec.errors import ConfigError
from agentspec.mcp import MCPToolkit
from agentspec.runtime.policies.protocol import Decision
from agentspec.types import Effect

REPO = Path(__file__).resolve().parents[1]
FILES = str(REPO / "tests" / "servers" / "files_server.py")


class _Authority:
    """Lists the folder, then thinks a while (time for the speculator to run ahead), then answers."""

    async def decide(self, history) -> Decision:
        await anyio.sleep(0.3 if not history else 1.5)
        if not history:
            return Decision(call=call("list_dir"))
        return Decision(call=None, final={"answer": "listed"})


class _Speculator:
    """Guesses the list, then a `peek` the authority never asks for (a wrong guess)."""

    async def decide(self, history) -> Decision:
        guesses = [call("list_dir"), call("peek", name="x")]
        guess = guesses[len(history)] if len(history) < len(guesses) else None
        return Decision(call=guess.model_copy(update={"id": f"g{len(history)}"}) if guess else None)


async def _run(root: Path, **options: object):
    async with MCPToolkit.stdio("python", FILES, str(root), **options) as tools:
        effects = {spec.name: spec.effect for spec in tools.tool_specs()}
        result = await Executor(tools, authority=_Authority(), speculator=_Speculator(), mode="sa").run("list it")
        return effects, result


def test_untrusted_read_only_claim_never_runs_speculatively(tmp_path: Path):
    effects, result = anyio.run(_run, tmp_path)
    assert set(effects.values()) == {Effect.EXTERNAL}  # peek, list_dir, read_path... all external
    assert [step.call.name for step in result.steps] == ["list_dir"]
    assert [step.source for step in result.steps] == ["authority"]
    assert not (tmp_path / "peeked-x").exists()  # the wrong guess never ran: nothing leaked into live
    assert all(step.observation.isolation is None for step in result.steps)


def test_trusted_read_only_claim_is_speculated_and_every_result_says_so(tmp_path: Path):
    effects, result = anyio.run(lambda: _run(tmp_path, trust_annotations=True))
    assert effects["peek"] is Effect.READ_ONLY and effects["write_file"] is Effect.EXTERNAL
    assert [step.call.name for step in result.steps] == ["list_dir"]
    assert result.steps[0].source != "authority"  # served from the speculator's fork
    # The lie: trusted, the wrong guess ran against the live server and wrote (what trusting a server risks).
    assert (tmp_path / "peeked-x").exists()
    assert [step.observation.isolation for step in result.steps] == ["trusted-annotations"]


def test_trust_is_refused_for_a_sandboxed_server():
    with pytest.raises(ConfigError, match="outside a sandbox"):
        MCPToolkit.stdio("python", FILES, sandbox="overlay", trust_annotations=True)


def test_cli_bench_option_trusts_annotations_and_results_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from agentspec.cli import main

    root, out = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    tasks = tmp_path / "tasks.jsonl"
    gold = [{"name": "list_dir", "arguments": {}}, {"name": "done", "arguments": {"answer": "(empty)"}}]
    tasks.write_text(json.dumps({"id": "ls", "task": "List the folder.", "answer": "(empty)", "gold": gold}) + "\n")
    base = ["run", "--json", "--bench", "mcp", "--mcp", f"python {FILES} {root}", "--tasks", str(tasks), "--agent", "oracle",
            "--mode", "sa", "--speculator-model", "noisy-oracle:1.0", "--no-progress", "--latency-model", "smc-paper"]
    assert main([*base, "--out", str(out / "plain")]) == 0
    assert main([*base, "--out", str(out / "trusted"), "--bench-option", "trust_annotations=true"]) == 0
    summaries = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    plain, trusted = (summary["modes"]["sa"] for summary in summaries)
    assert plain["live_executions"] == 1 and plain["commits_sa"] == 0  # untrusted: external, run live
    assert trusted["live_executions"] == 0  # trusted: the read-only call was speculated
    # The results say so: the run's config records the option, and every logged observation its isolation.
    assert json.loads((out / "trusted" / "results.json").read_text())["config"]["bench_options"][
        "trust_annotations"] == "true"
    assert '"isolation":"trusted-annotations"' in (out / "trusted" / "run-sa.log.jsonl").read_text()
    assert "trusted-annotations" not in (out / "plain" / "run-sa.log.jsonl").read_text()
    assert main([*base, "--bench-option", "trust_annotations=maybe"]) == 2
    assert "trust_annotations=maybe: true or false" in capsys.readouterr().err
    # The flag is the same option, spelt as the other --mcp flags are.
    assert main([*base, "--out", str(out / "flag"), "--mcp-trust-annotations"]) == 0
    assert json.loads((out / "flag" / "results.json").read_text())["config"]["bench_options"][
        "trust_annotations"] == "true"
    assert main([*base, "--mcp-trust-annotations", "--mcp-sandbox", "overlay"]) == 2
    assert "trust_annotations is for a server outside a sandbox" in capsys.readouterr().err


def test_untrusted_tools_are_external_even_when_a_spec_says_read_only():
    from agentspec.mcp import MCPServer

    toolkit = MCPToolkit(MCPServer(command="true"))
    spec = toolkit._spec({"name": "peek", "annotations": {"readOnlyHint": True}})
    assert spec.effect is Effect.EXTERNAL
    assert MCPToolkit(MCPServer(command="true"), trust_annotations=True)._spec(
        {"name": "peek", "annotations": {"readOnlyHint": True}}).effect is Effect.READ_ONLY
