"""Your own environment and your tasks as a bench: what lets :class:`agentspec.api.Executor` run on the pipeline.

A task is a text; its id is the sha256 of that text (:func:`task_key`), so a run log knows it again after a crash.
The agent sees ``system_prompt`` followed by the task and the environment's tools plus ``done`` (which takes its
final answer).  A user task has no gold answer: its reward is 1 when the agent ends it by calling ``done``, 0
otherwise (a call limit, an error).

The same class serves two callers: the Python API, whose one environment object lives across its tasks (the
toolkit you passed in is the live state you read afterwards), and a bench package wrapping an environment factory
(a fresh environment per task, as every bench does), which a test runs through ``agentspec run`` beside the API.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentspec.bench.protocol import DONE_WITH_ANSWER
from agentspec.errors import ConfigError
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Requestor, Step, TerminationReason, ToolCall, ToolSpec

DEFAULT_PROMPT = (
    "You are an agent that completes the user's task by calling tools, one call per turn. "
    "When the task is complete, call `done` with your final answer."
)


def task_key(task: str) -> str:
    """A task's id: the sha256 of its whole text (no two tasks share one)."""
    return "task-" + hashlib.sha256(task.encode()).hexdigest()


class UserTask(BaseModel):
    """One task of yours: its id and its text."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str


class TaskScore(BaseModel):
    """A user task's score: done or not, and the agent's final answer."""

    reward: float
    termination: TerminationReason
    answer: str | None = None


class UserTasks:
    """The :class:`~agentspec.bench.protocol.Bench` of an environment of yours and the tasks you give it, solo.

    ``environment``: the backend every task runs in (the Python API's: its state carries from task to task), or a
    factory making a fresh one per task.  Tasks are added as they come (:meth:`add`)."""

    name = "api"
    default_split = "tasks"
    in_process = True

    def __init__(self, environment: SnapshotBackend | Callable[[], SnapshotBackend], *,
                 system_prompt: str = DEFAULT_PROMPT, tasks: Sequence[str] = (), name: str = "api") -> None:
        self.environment = environment
        self.system_prompt_text = system_prompt
        self.name = name
        self._tasks: dict[str, UserTask] = {}
        self._factory_tools: list[ToolSpec] | None = None
        for text in tasks:
            self.add(text)

    def add(self, text: str, task_id: str | None = None) -> UserTask:
        """Task ``text`` under ``task_id`` (default :func:`task_key`); the same id for another text is refused."""
        task = UserTask(id=task_id or task_key(text), text=text)
        known = self._tasks.setdefault(task.id, task)
        if known.text != text:
            raise ConfigError(f"task id {task.id!r} is already the id of another task")
        return known

    def tasks(self, split: str, task_ids: list[str] | None = None, limit: int | None = None) -> list[UserTask]:
        chosen = [self.task(t) for t in task_ids] if task_ids else list(self._tasks.values())
        return chosen[:limit] if limit is not None else chosen

    def task(self, task_id: str) -> UserTask:
        if task_id not in self._tasks:
            raise ConfigError(f"no task {task_id!r}: tasks are {', '.join(self._tasks) or 'none yet'}")
        return self._tasks[task_id]

    def _backend(self) -> SnapshotBackend:
        return self.environment if isinstance(self.environment, SnapshotBackend) else self.environment()

    @asynccontextmanager
    async def open_backend(self, task: UserTask, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        # A backend given to the API is the user's to close; one this bench made is its task's alone.
        yield self._backend()

    def tools(self, task: UserTask, *, solo: bool) -> list[ToolSpec]:
        return [*self._backend_tools(), DONE_WITH_ANSWER]

    def _backend_tools(self) -> list[ToolSpec]:
        if isinstance(self.environment, SnapshotBackend):
            return self.environment.tool_specs()
        if self._factory_tools is None:  # every environment the factory makes has the same tools
            self._factory_tools = self.environment().tool_specs()
        return self._factory_tools

    def system_prompt(self, task: UserTask, *, solo: bool) -> str:
        return f"{self.system_prompt_text}\n\nTask: {task.text}"

    def gold_actions(self, task: UserTask) -> list[tuple[Requestor, ToolCall]]:
        return []  # your tasks have no gold calls: the oracle agent and a noisy oracle cannot play them

    def distractors(self) -> list[ToolCall]:
        return []

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        return []

    async def evaluate(self, task: UserTask, steps: Sequence[Step], termination: TerminationReason, *, solo: bool,
                       live: SnapshotBackend, final: dict[str, Any] | None = None) -> TaskScore:
        answer = (final or {}).get("answer")
        return TaskScore(reward=1.0 if termination is TerminationReason.AGENT_STOP else 0.0, termination=termination,
                         answer=str(answer) if answer is not None else None)
