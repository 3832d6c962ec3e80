"""The workspace environment: tool schemas and effects, each tool's behaviour, and the executor over it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from sandbox_support import C, needs_bwrap  # noqa: F401 - fixture

from agentspec.errors import ConfigError
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.policies.protocol import Decision
from agentspec.sandbox.program import Limits, Op, plan
from agentspec.types import Effect, Observation, ToolCall
from envs.workspace import WorkspaceTools, open_workspace, workspace_program

pytestmark = pytest.mark.anyio
jailed = pytest.mark.usefixtures("needs_bwrap")


def test_tools_declare_schemas_and_effects() -> None:
    specs = {spec.name: spec for spec in WorkspaceTools().specs()}
    assert set(specs) == {"read_file", "write_file", "delete_path", "list_files", "grep", "run_python", "run_shell"}
    for name in ("read_file", "list_files", "grep"):
        assert specs[name].effect is Effect.READ_ONLY
    for name in ("write_file", "delete_path", "run_python", "run_shell"):
        assert specs[name].effect is Effect.MUTATING
    assert specs["write_file"].parameters["required"] == ["path", "content"]
    assert "regular expression" in specs["grep"].parameters["properties"]["pattern"]["description"]


def test_calls_plan_ops_or_errors_before_entering_the_sandbox() -> None:
    program = workspace_program()
    assert plan(program, C("read_file", path="a")) == Op.of("read_file", path="a", offset=0, limit=100_000)
    wrong = plan(program, C("read_file"))
    assert isinstance(wrong, Observation) and wrong.error
    assert program.effect("no_such_tool") is Effect.MUTATING  # fail closed


@jailed
async def test_each_tool_does_its_job(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("Alpha\nbeta\nGamma beta\n")
    async with open_workspace("overlay", source=tmp_path, limits=Limits(max_output=2000)) as env:
        assert (await env.execute(C("read_file", path="notes.md", offset=6, limit=4))).content == "beta"
        await env.execute(C("write_file", path="src/app.py", content="print('hi')\n"))
        await env.execute(C("write_file", path="src/app.py", content="print('again')\n", append=True))
        assert (await env.execute(C("list_files"))).content.splitlines() == ["notes.md", "src/"]
        assert (await env.execute(C("list_files", recursive=True))).content.splitlines() == ["notes.md", "src/app.py"]
        assert (await env.execute(C("grep", pattern="BETA", ignore_case=True, max_matches=1))).content.startswith(
            "notes.md:2:beta\n[stopped after 1 matches]"
        )
        assert (await env.execute(C("run_shell", command="python3 src/app.py"))).content == "hi\nagain\n"
        assert (await env.execute(C("run_python", code="import os; print(sorted(os.listdir('.')))"))).content.strip() == "['notes.md', 'src']"
        slow = await env.execute(C("run_python", code="import time; time.sleep(20)", timeout_s=0.5))
        assert slow.error and "timed out after 0.5s" in slow.content
        long = await env.execute(C("run_python", code="print('x' * 5000)"))
        assert "[output truncated: 2000 of 5001 characters shown]" in long.content
        assert (await env.execute(C("delete_path", path="."))).error
        assert (await env.execute(C("delete_path", path="src"))).content == "deleted src"
        assert (await env.execute(C("list_files", recursive=True))).content == "notes.md"


async def test_unknown_backend_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        async with open_workspace("nfs"):  # type: ignore[arg-type]
            pass


@dataclass
class Script:
    """An authority (or a perfect speculator) that walks a fixed list of calls."""

    calls: list[ToolCall]
    think: float

    async def decide(self, history: Any) -> Decision:
        await anyio.sleep(self.think)
        return Decision(call=self.calls[len(history)] if len(history) < len(self.calls) else None)


SCRIPT = [
    C("write_file", path="data.csv", content="a,b\n1,2\n"),
    C("run_python", code="import csv; rows = list(csv.reader(open('data.csv'))); open('n.txt', 'w').write(str(len(rows)))"),
    C("read_file", path="n.txt"),
    C("run_shell", command="cat n.txt n.txt > twice.txt"),
    C("grep", pattern="2", path="twice.txt"),
]


@jailed
@pytest.mark.parametrize("kind", ["overlay", "copy"])
@pytest.mark.parametrize("mode", ["sequential", "sa"])
async def test_the_executor_runs_over_the_workspace(kind: str, mode: str) -> None:
    async with open_workspace(kind) as env:
        authority = Script(SCRIPT, think=0.3)
        speculator = Script(SCRIPT, think=0.0) if mode != "sequential" else None
        loop = ExecutionLoop(env, authority, speculator, config=ExecutorConfig(mode=mode))
        result = await loop.run()
        assert [step.call for step in result.steps] == SCRIPT
        assert result.steps[2].observation.content == "2"
        assert (await env.execute(C("list_files"))).content.splitlines() == ["data.csv", "n.txt", "twice.txt"]
        assert (await env.execute(C("read_file", path="twice.txt"))).content == "22"
        if mode == "sa":
            assert any(step.source == "sa" for step in result.steps)
