"""The typed bench seam: every bench offers exactly the tools, prompts and distractors it offered before the seam
was typed, optional features are protocols, and the pieces benches share (the ``done`` tool, ``distractors``, the
toolkit environment) are one implementation each.

The ``FROZEN`` hashes below were computed with the code as it was *before* the seam was reworked (``done`` tools
written out in every bench, ``distractors`` written four times, GAIA's own environment class) and are kept as they
were: a change to one of them is a change of what a model is shown, or of a noisy speculator's seeded draws.
Distractors are compared by their canonical text (``ToolCall`` equality ignores ids: the old ids were random).
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_appworld import fixture_root, venv  # noqa: F401 - fixtures: AppWorld's data, made in its venv

from agentspec.bench.protocol import (
    DONE_WITH_ANSWER,
    AnswerScorer,
    Bench,
    ModeFigures,
    UserSimulator,
    distractors,
    done_tool,
    has_user,
    user_of,
)
from agentspec.env import ToolkitEnvironment
from agentspec.errors import ConfigError
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect, ToolCall

REPO = Path(__file__).resolve().parents[1]
GAIA_FIXTURES = REPO / "tests" / "data" / "gaia-format"
NOTES = str(REPO / "tests" / "servers" / "notes_server.py")


def _sha(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(bench: Bench[Any], tasks: Sequence[Any], *, solo: bool) -> dict[str, str]:
    """Short hashes of what ``bench`` shows a model for ``tasks`` (tools in order, with their schemas and effects;
    system prompts) and of its gold calls and distractors (canonical text, in order)."""
    return {
        "tools": _sha([[spec.model_dump(mode="json") for spec in bench.tools(task, solo=solo)] for task in tasks]),
        "prompts": _sha([bench.system_prompt(task, solo=solo) for task in tasks]),
        "gold": _sha([[who, call.canonical()] for task in tasks for who, call in bench.gold_actions(task)]),
        "distractors": _sha([call.canonical() for call in bench.distractors()]),
    }


# Computed before the rework (see the module docstring): bench -> what a model was shown, and the speculator's draws.
FROZEN: dict[str, dict[str, str]] = {
    "tau2-solo": {"tools": "751426898b5d449c", "prompts": "84ab2afc407d8012", "gold": "d589c989842a9ab0",
                  "distractors": "fb82b14c141d1c01"},
    "tau2-normal": {"tools": "6c611dcb7d27107a", "prompts": "829ff0e83e2f097c", "gold": "d589c989842a9ab0",
                    "distractors": "fb82b14c141d1c01"},
    "workspace": {"tools": "6209d6d690e04044", "prompts": "17165a9b3068a67b", "gold": "6de6dc760fd2bc3d",
                  "distractors": "0a18cde3e1c5042b"},
    # GAIA's tools changed on purpose since: their schemas are closed (no extra arguments; a constrained decoder let a
    # real model call read_attachment(file=...)), experiments/harness_models.md.
    "gaia-docker": {"tools": "dad05ae01f24dec0", "prompts": "5455c003a449ce1d", "gold": "c5d2da1cf576b81f",
                    "distractors": "3cb0fa8055a83776"},
    "gaia-none": {"tools": "efeb5de3ac6bd51b", "prompts": "d3618feae0c4fc24", "gold": "c5d2da1cf576b81f",
                  "distractors": "3cb0fa8055a83776"},
    # Changed on purpose since (issue 37): a server's annotations are untrusted, so its tools are external unless the
    # user trusts them.  Was "bdb3eb6ededb3470".
    "mcp": {"tools": "717b5e3366d9e5fa", "prompts": "09aec687e53932ca", "gold": "ca9cc6d68c0f5e6b",
            "distractors": "cc85eb132d04ab7d"},
    # Changed on purpose since (issue 30): a task whose required_apps list is empty is offered the supervisor's tools,
    # not every app's (AppWorld's ground truth lists the apps besides supervisor), so agspecaddr_* show 11 tools, not
    # 458 (tests/test_appworld_all_apps.py).  Was "12e4ac11ad22111c".
    "appworld-api": {"tools": "97c37dd4ec004011", "prompts": "04ff964be9c57ff3", "gold": "6e6b8a53fc261cbc",
                     "distractors": "ffd607468452285b"},
    "appworld-meta": {"tools": "db2aaef8c40aff7c", "prompts": "c916d798d3eb3df6", "gold": "56b275e80d5b21bb",
                      "distractors": "70537b94529a3887"},
    "appworld-code": {"tools": "df5a9709df7f6104", "prompts": "97704ce977f01a35", "gold": "14a6bb2d60974746",
                      "distractors": "2f38bd8c849b0881"},
}
FROZEN_API_DONE = {"name": "done", "description": "Finish the task and give the final answer.",
                   "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": []},
                   "effect": "read_only"}
FROZEN_TAU2_DONE = {"name": "done", "description": "Call this when the ticket is resolved or handed over.",
                    "parameters": {"type": "object", "properties": {}}, "effect": "read_only"}

MCP_TASKS = [
    {"id": "t1", "task": "Write down 'buy milk'", "answer": "1 note",
     "gold": [{"name": "add_note", "arguments": {"text": "buy milk"}}, {"name": "list_notes"},
              {"name": "done", "arguments": {"answer": "1 note"}}]},
    {"id": "t2", "task": "List the notes",
     "gold": [{"name": "list_notes"}, {"name": "done", "arguments": {"answer": "none"}}]},
]


def _mcp_bench(folder: Path) -> Bench[Any]:
    from agentspec.mcp import MCPServer
    from envs.mcp.bench import MCPBench, MCPTask

    tasks = [MCPTask.model_validate(task) for task in MCP_TASKS]
    return MCPBench(MCPServer.of_command_line(f"{sys.executable} {NOTES} {folder}"), tasks)


@pytest.fixture(scope="module")
def benches(tau2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Bench[Any], list[Any], bool]]:
    """Every bench but AppWorld (its data comes from its engine's venv), with the tasks fingerprinted and whether
    they are played solo."""
    from agentspec.bench.registry import open_bench
    from envs.gaia.bench import GaiaBench
    from envs.workspace.bench import WorkspaceBench

    tau2 = open_bench("tau2-telecom", tau2_dir)
    workspace = WorkspaceBench()
    mcp = _mcp_bench(tmp_path_factory.mktemp("notes"))
    found: dict[str, tuple[Bench[Any], list[Any], bool]] = {
        "tau2-solo": (tau2, tau2.tasks("base", limit=6), True),
        "tau2-normal": (tau2, tau2.tasks("base", limit=6), False),
        "workspace": (workspace, workspace.tasks("all"), True),
        "mcp": (mcp, mcp.tasks("all"), True),
    }
    for sandbox in ("docker", "none"):
        gaia = GaiaBench.from_data_dir(GAIA_FIXTURES, backend=sandbox)
        found[f"gaia-{sandbox}"] = (gaia, gaia.tasks("validation"), True)
    return found


@pytest.mark.parametrize("name", ["tau2-solo", "tau2-normal", "workspace", "gaia-docker", "gaia-none", "mcp"])
def test_every_bench_shows_a_model_what_it_showed_before(benches: dict[str, Any], name: str) -> None:
    bench, tasks, solo = benches[name]
    assert fingerprint(bench, tasks, solo=solo) == FROZEN[name]


@pytest.mark.parametrize("actions", ["api", "meta", "code"])
def test_appworld_shows_a_model_what_it_showed_before(fixture_root: Path, actions: str) -> None:  # noqa: F811
    from envs.appworld.bench import AppWorldBench

    bench = AppWorldBench.from_data_dir(fixture_root, actions=actions)
    tasks = bench.tasks("train") + bench.tasks("dev")
    assert fingerprint(bench, tasks, solo=True) == FROZEN[f"appworld-{actions}"]


def test_the_done_tools_are_the_ones_they_were() -> None:
    from agentspec.api import as_backend
    from agentspec.bench.tau2.parties import DONE_TOOL
    from agentspec.bench.user_tasks import UserTasks

    api = UserTasks(as_backend(Notes()), tasks=["write it down"])  # what the Python API's agent is offered
    *_, done = api.tools(api.tasks("tasks")[0], solo=True)
    assert done.model_dump(mode="json") == FROZEN_API_DONE
    assert DONE_TOOL.model_dump(mode="json") == FROZEN_TAU2_DONE


# --- optional features are protocols; what benches share is written once --------------------------------


def test_only_tau2_has_a_user_and_no_bench_carries_one_that_raises(benches: dict[str, Any]) -> None:
    for name, (bench, tasks, _) in benches.items():
        assert isinstance(bench, Bench), name
        assert has_user(bench) is name.startswith("tau2"), name
        assert isinstance(bench, UserSimulator) is hasattr(bench, "user"), name  # a solo bench has no user() at all
        if not has_user(bench):
            with pytest.raises(ConfigError, match=f"{bench.name} has no user simulator"):
                user_of(bench, tasks[0], None)
    assert isinstance(benches["gaia-none"][0], ModeFigures | AnswerScorer)
    assert not isinstance(benches["workspace"][0], ModeFigures | AnswerScorer)


def test_every_solo_bench_ends_with_a_read_only_done(benches: dict[str, Any]) -> None:
    for name, (bench, tasks, solo) in benches.items():
        done = bench.tools(tasks[0], solo=solo)[-1]
        if solo:
            assert (done.name, done.effect) == ("done", Effect.READ_ONLY), name
        else:
            assert done.name != "done", name  # normal mode ends when the user stops, not with a tool


def test_done_tool_writes_the_schema_asked_for() -> None:
    assert done_tool("Stop.").parameters == {"type": "object", "properties": {}}
    assert done_tool("Stop.", required=()).parameters == {"type": "object", "properties": {}, "required": []}
    answered = done_tool("Answer.", answer=True, required=["answer"])
    assert answered.parameters == {"type": "object", "properties": {"answer": {"type": "string"}},
                                   "required": ["answer"]}
    assert DONE_WITH_ANSWER.parameters["required"] == [] and DONE_WITH_ANSWER.effect is Effect.READ_ONLY


def test_distractors_are_checks_by_name_then_distinct_gold_calls_in_canonical_order() -> None:
    status, speed = ToolCall(name="check_status"), ToolCall(name="speed_test")
    refund = ToolCall(name="refund", arguments={"amount": 5})
    gold = [refund, ToolCall(name="lookup", arguments={"id": "C1"}), ToolCall(name="refund", arguments={"amount": 5})]
    found = distractors(gold, checks=[speed, status, ToolCall(name="speed_test", arguments={"fast": True})])
    assert found == [status, speed, *sorted({refund, gold[1]}, key=ToolCall.canonical)]
    assert [call.id for call in found] == [f"distractor_{i}" for i in range(4)]
    assert distractors([]) == []


# --- the toolkit environment -------------------------------------------------------------------------


class Notes(Toolkit):
    def __init__(self) -> None:
        self.notes: list[str] = []

    @tool(Effect.READ_ONLY)
    def count(self) -> int:
        """How many notes there are."""
        return len(self.notes)

    @tool(Effect.MUTATING)
    def add(self, text: str) -> str:
        """Add a note."""
        self.notes.append(text)
        return "ok"


class Reader(Toolkit):
    @tool(Effect.READ_ONLY)
    def read(self) -> str:
        """Read the one page."""
        return "page"


def test_a_toolkit_environment_copies_its_state_per_snapshot() -> None:
    env = ToolkitEnvironment(Notes())
    env.execute(ToolCall(name="add", arguments={"text": "milk"}))
    fork = env.restore(env.snapshot())
    fork.execute(ToolCall(name="add", arguments={"text": "eggs"}))
    assert env.execute(ToolCall(name="count")).content == "1" and fork.execute(ToolCall(name="count")).content == "2"
    assert env.effect("add") is Effect.MUTATING and env.effect("fly") is Effect.MUTATING


def test_a_shared_toolkit_environment_is_one_for_every_fork_and_only_reads() -> None:
    env = ToolkitEnvironment(Reader(), shared=True)
    assert env.restore(env.snapshot()) is env
    assert env.effect("read") is Effect.READ_ONLY and env.effect("fly") is Effect.EXTERNAL  # nothing isolates it
    assert env.execute(ToolCall(name="read")).content == "page"
    with pytest.raises(ConfigError, match="only read; these do not: add"):
        ToolkitEnvironment(Notes(), shared=True)


# --- no duck typing on benches ---------------------------------------------------------------------------


def _attribute_probes_on_benches(source: str) -> list[int]:
    """Lines of ``hasattr(X, ...)``/``getattr(X, ...)`` calls whose object ``X`` names a bench."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                and node.args and "bench" in ast.unparse(node.args[0]).lower()):
            lines.append(node.lineno)
    return lines


def test_no_bench_feature_is_found_by_hasattr() -> None:
    assert _attribute_probes_on_benches("if hasattr(outcome.bench, 'submission'):\n    pass\n") == [1]
    assert _attribute_probes_on_benches("x = getattr(args, 'bench_option', [])\n") == []
    found = [f"{path.relative_to(REPO)}:{line}" for path in sorted((REPO / "agentspec").rglob("*.py"))
             for line in _attribute_probes_on_benches(path.read_text(encoding="utf-8"))]
    assert not found, f"bench features found by hasattr/getattr, not by an isinstance of a protocol: {found}"
