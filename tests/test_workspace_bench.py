"""The workspace-demo bench against real overlay/copy sandboxes: gold calls solve every task, scoring is strict.

Episodes run through the bench's own seam (``open_backend``, ``execute``,
``evaluate``), so what is checked is what a run sees: the gold script leaves
files every check accepts, one missing edit is caught and named, and each
episode starts from the task's files again.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - fixture

from agentspec.bench.protocol import Bench, Score, has_user, user_of
from agentspec.errors import ConfigError
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Effect, Step, TerminationReason, ToolCall
from envs.workspace.bench import DONE_TOOL, WorkspaceBench, WorkspaceScore
from envs.workspace.demo_tasks import TASKS, FileCheck, WorkspaceTask

TASK_IDS = [task.id for task in TASKS]
jailed = pytest.mark.usefixtures("needs_bwrap")

READ_ONLY_TOOLS = {"read_file", "list_files", "grep", "done"}

FAILS_WITHOUT_LAST_MUTATION = {
    "ws-rename-config": {"config/settings.ini absent"},
    "ws-fix-add": {"test_output.txt content"},
    "ws-todo-report": {"TODO.md content"},
    "ws-sales-total": {"data/total.txt content"},
    "ws-clean-logs": {"logs/run.tmp absent", "cache.tmp absent"},
    "ws-bump-version": {r"CHANGELOG.md matches \A# Changelog\n\n## 1\.4\.3\n\n- Bump the version\.\n"},
}
"""Task id -> the checks that must fail when the last mutating gold call is left out (and no others)."""


async def _play(backend: SnapshotBackend, calls: list[ToolCall]) -> list[Step]:
    """Run ``calls`` in order on the live backend, asserting each one succeeded, as committed steps."""
    steps = []
    for index, call in enumerate(calls):
        observation = await backend.execute(call)
        assert not observation.error, (call, observation.content)
        assert "[exit code" not in observation.content, (call, observation.content)  # a command that failed
        steps.append(Step(index=index, call=call, observation=observation))
    return steps


def _gold(bench: WorkspaceBench, task: WorkspaceTask) -> list[ToolCall]:
    return [call for _, call in bench.gold_actions(task)]


def _effects(bench: WorkspaceBench, task: WorkspaceTask) -> dict[str, Effect]:
    return {spec.name: spec.effect for spec in bench.tools(task, solo=True)}


# --- episodes in real sandboxes ------------------------------------------------------------


@jailed
@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["overlay", "copy"])
@pytest.mark.parametrize("task_id", TASK_IDS)
async def test_gold_calls_solve_the_task(task_id: str, kind: str) -> None:
    bench = WorkspaceBench(backend=kind)  # type: ignore[arg-type]
    task = bench.task(task_id)
    async with bench.open_backend(task, solo=True) as live:
        steps = await _play(live, _gold(bench, task))
        score = await bench.evaluate(task, steps, TerminationReason.AGENT_STOP, solo=True, live=live)
    assert score.reward == 1.0, score.checks
    assert score.failed == []
    assert [check.name for check in score.checks] == [check.name for check in task.checks]
    assert score.steps == len(task.gold)
    assert isinstance(score, Score)
    assert score.model_dump(mode="json")["termination"] == "agent_stop"


@jailed
@pytest.mark.anyio
@pytest.mark.parametrize("task_id", TASK_IDS)
async def test_skipping_the_last_mutating_call_fails_the_named_check(task_id: str) -> None:
    bench = WorkspaceBench()
    task = bench.task(task_id)
    effects = _effects(bench, task)
    calls = _gold(bench, task)
    last = max(i for i, call in enumerate(calls) if effects[call.name] is not Effect.READ_ONLY)
    async with bench.open_backend(task, solo=True) as live:
        steps = await _play(live, calls[:last])
        score = await bench.evaluate(task, steps, TerminationReason.AGENT_STOP, solo=True, live=live)
    assert score.reward == 0.0
    assert set(score.failed) == FAILS_WITHOUT_LAST_MUTATION[task_id]
    assert all(check.detail for check in score.checks if not check.passed)  # says what it found instead


@jailed
@pytest.mark.anyio
@pytest.mark.parametrize(
    "termination", [reason for reason in TerminationReason if reason is not TerminationReason.AGENT_STOP]
)
async def test_only_an_agent_stop_earns_the_reward(termination: TerminationReason) -> None:
    bench = WorkspaceBench()
    task = bench.task("ws-sales-total")
    async with bench.open_backend(task, solo=True) as live:
        steps = await _play(live, _gold(bench, task))
        score = await bench.evaluate(task, steps, termination, solo=True, live=live)
    assert score.reward == 0.0
    assert score.failed == []  # the files were right; the episode did not end by the agent's choice
    assert score.termination is termination


@jailed
@pytest.mark.anyio
async def test_each_episode_starts_from_the_task_files_and_cleans_up() -> None:
    bench = WorkspaceBench()
    task = bench.task("ws-rename-config")
    pattern = f"agentspec-run-*-{task.id}-*"  # the run folder names its owner (pid, start time): sweepable
    before = set(Path(tempfile.gettempdir()).glob(pattern))
    async with bench.open_backend(task, solo=True) as live:
        await _play(live, _gold(bench, task))
        solved = await bench.evaluate(task, [], TerminationReason.AGENT_STOP, solo=True, live=live)
        assert set(Path(tempfile.gettempdir()).glob(pattern)) - before  # the seed folder exists while open
    assert solved.reward == 1.0
    assert set(Path(tempfile.gettempdir()).glob(pattern)) == before  # and is gone after
    async with bench.open_backend(task, solo=True) as live:
        fresh = await bench.evaluate(task, [], TerminationReason.AGENT_STOP, solo=True, live=live)
        listing = await live.execute(ToolCall(name="list_files", arguments={"recursive": True}))
    assert fresh.reward == 0.0
    assert listing.content.splitlines() == sorted(task.files)


@jailed
@pytest.mark.anyio
async def test_an_absent_check_sees_directories() -> None:
    bench = WorkspaceBench()
    task = bench.task("ws-clean-logs")
    async with bench.open_backend(task, solo=True) as live:
        # Only the *.tmp files go: logs/old (a directory, which read_file cannot tell from a missing file) stays.
        await live.execute(ToolCall(name="run_shell", arguments={"command": "find . -name '*.tmp' -type f -delete"}))
        score = await bench.evaluate(task, [], TerminationReason.AGENT_STOP, solo=True, live=live)
    assert score.failed == ["logs/old absent"]


# --- the protocol and the task table -----------------------------------------------------


def test_the_bench_satisfies_the_protocol() -> None:
    bench = WorkspaceBench()
    assert isinstance(bench, Bench)
    assert bench.name == "workspace-demo"
    assert not has_user(bench)
    for task in bench.tasks("all"):
        specs = bench.tools(task, solo=True)
        assert [spec.name for spec in specs][-1] == "done"
        assert DONE_TOOL in specs
        for spec in specs:
            assert isinstance(spec.effect, Effect)
            assert spec.effect is (Effect.READ_ONLY if spec.name in READ_ONLY_TOOLS else Effect.MUTATING), spec.name
        assert task.instruction in bench.system_prompt(task, solo=True)


def test_the_bench_has_no_user() -> None:
    bench = WorkspaceBench()
    with pytest.raises(ConfigError, match="workspace-demo has no user simulator"):
        user_of(bench, bench.task("ws-fix-add"), None)


def test_from_data_dir_ignores_the_cli_arguments() -> None:
    bench = WorkspaceBench.from_data_dir("/nonexistent", max_steps=5, max_errors=2, backend="copy")
    assert bench.backend == "copy"
    assert [task.id for task in bench.tasks("all")] == TASK_IDS
    with pytest.raises(ConfigError, match="unknown workspace backend 'vm'"):
        WorkspaceBench(backend="vm")  # type: ignore[arg-type]


def test_splits_ids_and_limits() -> None:
    bench = WorkspaceBench()
    assert 5 <= len(bench.tasks("all")) <= 6
    assert bench.tasks("small") == list(TASKS[:2])
    assert [t.id for t in bench.tasks("all", ["ws-clean-logs", "ws-fix-add"])] == ["ws-clean-logs", "ws-fix-add"]
    assert bench.tasks("all", limit=3) == list(TASKS[:3])
    assert bench.task("ws-todo-report").id == "ws-todo-report"


def test_unknown_split_or_task_names_what_is_known() -> None:
    bench = WorkspaceBench()
    with pytest.raises(ConfigError, match="unknown split 'base'") as split_error:
        bench.tasks("base")
    assert "all" in str(split_error.value) and "small" in str(split_error.value)
    for ask in (lambda: bench.task("ws-nope"), lambda: bench.tasks("all", ["ws-fix-add", "ws-nope"])):
        with pytest.raises(ConfigError, match="unknown task id 'ws-nope'") as task_error:
            ask()
        assert all(task_id in str(task_error.value) for task_id in TASK_IDS)


def test_every_task_mixes_reads_and_writes_with_stable_gold_calls() -> None:
    bench = WorkspaceBench()
    for task in TASKS:
        effects = _effects(bench, task)
        calls = _gold(bench, task)
        assert len(calls) >= 4, task.id
        kinds = {effects[call.name] for call in calls}  # a KeyError here is a gold call to a tool that does not exist
        assert Effect.READ_ONLY in kinds and Effect.MUTATING in kinds, task.id
        again = _gold(WorkspaceBench(), task)
        assert [(c.id, c.canonical()) for c in calls] == [(c.id, c.canonical()) for c in again]
        assert task.checks
    assert len(set(TASK_IDS)) == len(TASK_IDS)


def test_distractors_are_every_gold_call_plus_listings() -> None:
    bench = WorkspaceBench()
    distractors = bench.distractors()
    texts = [call.canonical() for call in distractors]
    assert texts == sorted(set(texts))
    gold = {call.canonical() for task in TASKS for call in task.gold}
    assert gold <= set(texts)
    assert ToolCall(name="list_files").canonical() in texts
    assert set(texts) - gold  # the extra listings are not all gold calls


def test_value_patterns_match_workspace_paths() -> None:
    (slot, value, argument), = WorkspaceBench().value_patterns()
    assert slot == "file_path" and argument is not None and re.search(argument, "path")
    paths = {call.arguments["path"] for task in TASKS for call in task.gold if "path" in call.arguments}
    assert paths and all(re.fullmatch(value, path) for path in paths)


def test_a_file_check_sets_exactly_one_condition() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        FileCheck("a.txt")
    with pytest.raises(ValueError, match="exactly one"):
        FileCheck("a.txt", content="x", absent=True)
    score = WorkspaceScore(reward=0.0, termination=TerminationReason.MAX_STEPS, steps=0, checks=[])
    assert score.failed == []
