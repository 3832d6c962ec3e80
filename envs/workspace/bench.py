"""``workspace-demo``: our own small file/code tasks, played solo in a sandboxed workspace.

The bench implements :class:`agentspec.bench.protocol.Bench` over the workspace
environment (:func:`envs.workspace.environment.open_workspace`).  Each episode
gets a fresh temporary folder holding the task's initial files, a backend of the
chosen kind (overlay, copy or Docker) started over it, and, once the agent has
called ``done``, a score read back from the final files with read-only calls::

    bench = WorkspaceBench()
    task = bench.task("ws-rename-config")
    async with bench.open_backend(task, solo=True) as live:
        for _, call in bench.gold_actions(task):
            await live.execute(call)
        score = await bench.evaluate(task, [], TerminationReason.AGENT_STOP, solo=True, live=live)
    assert score.reward == 1.0

There is no user simulator (the bench is no :class:`~agentspec.bench.protocol.UserSimulator`): every episode is
solo.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import anyio
from pydantic import BaseModel

from agentspec.bench.protocol import distractors, done_tool
from agentspec.errors import ConfigError
from agentspec.sandbox.overlay import run_folder
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Requestor, Step, TerminationReason, ToolCall, ToolSpec
from envs.workspace.demo_tasks import TASKS, FileCheck, WorkspaceTask
from envs.workspace.environment import dev_image, open_workspace
from envs.workspace.tools import WorkspaceTools

__all__ = ["DONE_TOOL", "CheckResult", "FileCheck", "WorkspaceBench", "WorkspaceScore", "WorkspaceTask"]

DONE_TOOL = done_tool("Finish the task: call it once the workspace is in the state the instruction asks for.",
                      required=())

INSTRUCTIONS = (
    "You are a software engineer working alone in a small workspace (paths are relative to its root). "
    "Use the file, Python and shell tools to do the task below, one tool call per turn, and call `done` "
    "when the workspace is in the state the task asks for."
)

SPLITS: dict[str, int | None] = {"all": None, "small": 2}
"""Split name -> how many of :data:`~envs.workspace.demo_tasks.TASKS` it takes from the front (None: all)."""

Backend = Literal["overlay", "copy", "docker"]


class CheckResult(BaseModel):
    """How one :class:`FileCheck` fared on the final files."""

    name: str
    path: str
    passed: bool
    detail: str = ""


class WorkspaceScore(BaseModel):
    """A workspace-demo episode's score: 1.0 iff the agent stopped by itself and every check holds."""

    reward: float
    termination: TerminationReason
    steps: int
    checks: list[CheckResult]

    @property
    def failed(self) -> list[str]:
        """The names of the checks that did not hold."""
        return [check.name for check in self.checks if not check.passed]


class WorkspaceBench:
    """The workspace-demo tasks over a workspace backend of one kind (see the module docstring)."""

    name = "workspace-demo"
    default_split = "all"
    in_process = False

    def __init__(self, *, backend: Backend = "overlay", **backend_options: Any) -> None:
        if backend not in ("overlay", "copy", "docker"):
            raise ConfigError(f"unknown workspace backend {backend!r} (overlay, copy or docker)")
        self.backend: Backend = backend
        self.backend_options = backend_options
        self._tasks = {task.id: task for task in TASKS}

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None, **kwargs: Any) -> WorkspaceBench:
        """The bench as the CLI builds every bench; ``data_dir`` is unused (the tasks ship in the repo).

        The CLI's ``max_steps``/``max_errors`` are dropped too: they bound the
        run, which the assembly enforces, not anything this bench decides.
        """
        kwargs.pop("max_steps", None)
        kwargs.pop("max_errors", None)
        return cls(**kwargs)

    # --- tasks -----------------------------------------------------------------------

    def tasks(
        self, split: str = "all", task_ids: list[str] | None = None, limit: int | None = None
    ) -> list[WorkspaceTask]:
        """The split's tasks (or the given ids, in that order), at most ``limit``; ConfigError on an unknown one."""
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r} of {self.name}; known: {', '.join(sorted(SPLITS))}")
        if task_ids:
            chosen = [self.task(task_id) for task_id in task_ids]
        else:
            chosen = list(TASKS[: SPLITS[split]])
        return chosen[:limit] if limit is not None else chosen

    def task(self, task_id: str) -> WorkspaceTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise ConfigError(f"unknown task id {task_id!r} of {self.name}; known: {', '.join(self._tasks)}") from None

    # --- environment -----------------------------------------------------------------

    @asynccontextmanager
    async def open_backend(self, task: WorkspaceTask, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        """A started backend over a fresh temporary folder seeded with ``task.files``; both removed on exit."""
        # Named with this run's pid and start time: a killed run's folder is swept (agentspec sandbox sweep).
        source = await anyio.to_thread.run_sync(run_folder, task.id)
        try:
            await anyio.to_thread.run_sync(_write_files, source, dict(task.files))
            options = dict(self.backend_options)
            if self.backend == "docker" and "image" not in options:
                options["image"] = await anyio.to_thread.run_sync(dev_image)
            async with open_workspace(self.backend, source=source, **options) as backend:
                yield backend
        finally:
            # The backend is closed first (it may read the source until then); a cancelled run still cleans up.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(source, ignore_errors=True))

    def tools(self, task: WorkspaceTask, *, solo: bool) -> list[ToolSpec]:
        """The workspace tools (reads read-only, writes and code runs mutating) plus ``done``."""
        return [*WorkspaceTools().specs(), DONE_TOOL]

    def system_prompt(self, task: WorkspaceTask, *, solo: bool) -> str:
        return f"{INSTRUCTIONS}\n\n<task>\n{task.instruction}\n</task>"

    # --- reference calls and mining ---------------------------------------------------

    def gold_actions(self, task: WorkspaceTask) -> list[tuple[Requestor, ToolCall]]:
        return [("assistant", call) for call in task.gold]

    def distractors(self) -> list[ToolCall]:
        """Every distinct gold call of every task plus two plain listings, sorted by canonical text."""
        listings = (ToolCall(name="list_files"), ToolCall(name="list_files", arguments={"recursive": True}))
        return distractors([*(call for task in TASKS for call in task.gold), *listings])

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        """Workspace paths under ``path`` arguments (``config/app.ini``, ``logs/old``) are the one slot type."""
        return [("file_path", r"[\w.-]+(/[\w.-]+)*", r"^path$")]

    # --- scoring ---------------------------------------------------------------------

    async def evaluate(
        self,
        task: WorkspaceTask,
        steps: Sequence[Step],
        termination: TerminationReason,
        *,
        solo: bool,
        live: SnapshotBackend,
        final: dict[str, Any] | None = None,
    ) -> WorkspaceScore:
        """Check the final files through read-only calls on ``live``; reward 1.0 iff all hold after AGENT_STOP.

        The checks run whatever the termination, so a failed episode's record
        still says how far it got.
        """
        results = [await _check(live, check) for check in task.checks]
        solved = termination is TerminationReason.AGENT_STOP and all(result.passed for result in results)
        return WorkspaceScore(reward=1.0 if solved else 0.0, termination=termination, steps=len(steps), checks=results)


def _write_files(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


async def _check(live: SnapshotBackend, check: FileCheck) -> CheckResult:
    if check.absent:
        # read_file fails on a directory as on a missing file, so ask the parent's listing instead.
        path = PurePosixPath(check.path)
        listing = await live.execute(ToolCall(name="list_files", arguments={"path": str(path.parent)}))
        entries = set() if listing.error else set(listing.content.splitlines())
        present = path.name in entries or f"{path.name}/" in entries
        detail = "still there" if present else ""
        return CheckResult(name=check.name, path=check.path, passed=not present, detail=detail)
    observed = await live.execute(ToolCall(name="read_file", arguments={"path": check.path}))
    if observed.error:
        return CheckResult(name=check.name, path=check.path, passed=False, detail=observed.content)
    if check.content is not None:
        passed = observed.content == check.content
    else:
        assert check.pattern is not None  # FileCheck sets exactly one kind
        passed = re.search(check.pattern, observed.content, re.MULTILINE) is not None
    return CheckResult(name=check.name, path=check.path, passed=passed, detail="" if passed else observed.content[:500])
