"""``mcp``: any MCP server's tools as a bench, with tasks from the command line or a JSONL file.

    agentspec run --bench mcp --mcp "python tests/servers/notes_server.py runs/notes" \\
        --task "Write down 'buy milk'" --agent-model URL
    agentspec run --bench mcp --mcp-url http://127.0.0.1:8000/mcp --tasks tasks.jsonl --agent-model URL
    agentspec run --bench mcp --mcp "python tests/servers/notes_server.py" --mcp-sandbox overlay ...
    agentspec run --bench mcp --mcp "python tests/servers/notes_server.py" --mcp-sandbox docker ...

Each line of a tasks file is a JSON object: ``task`` (the instruction), optionally ``id``, ``answer`` (the
episode is solved only when the agent's final answer contains it, ignoring case) and ``gold`` (the reference
calls, ``[{"name": ..., "arguments": {...}}]``, for ``--agent oracle`` and noisy-oracle speculators).

Every episode opens its own connection (a stdio server is started afresh and stopped at the end; a sandboxed
one runs over a fresh tree, or a fresh container with ``docker``, filled from ``source`` when given).  The tools'
effects come from :mod:`agentspec.mcp`: a server outside a sandbox has every tool ``external`` unless
``--bench-option trust_annotations=true`` trusts its ``readOnlyHint`` annotations (then its read-only tools are
speculated against the live server, and every result says ``isolation="trusted-annotations"``).  The tool list is
read once, when the bench is built.  There is no user simulator: every episode is solo, and ends with ``done``.

``agentspec mine`` and ``agentspec speculator fit|score`` replay the tasks' gold calls (and their own probes and
guesses) to see what they return.  On a server outside a sandbox that would run them on the user's live server,
so those commands refuse it (:meth:`MCPBench.prepare_replay`); on a sandboxed one they run in fresh trees, and every
read-only call in a fork (a probe, a guess) has the ``lookahead_timeout_s`` deadline (``--bench-option
lookahead_timeout_s=S``, default :data:`LOOKAHEAD_TIMEOUT_S`): a tool that runs past it is not run in a fork again,
so a slow or hanging read-only tool costs one deadline, not one per probe of every state of every task.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.bench.protocol import DONE_WITH_ANSWER, distractors
from agentspec.errors import ConfigError
from agentspec.mcp import SANDBOX_KINDS, MCPBackend, MCPServer, MCPToolkit, SandboxKind, sandboxed_toolkit
from agentspec.snapshot import SnapshotBackend
from agentspec.types import Requestor, Step, TerminationReason, ToolCall, ToolSpec

__all__ = ["MCPBench", "MCPScore", "MCPTask"]

DONE_TOOL = DONE_WITH_ANSWER
#: The deadline of a read-only call in a fork while mining or fitting (a probe, a sampled guess), in seconds.
LOOKAHEAD_TIMEOUT_S = 5.0

INSTRUCTIONS = (
    "You are an agent that completes the user's task by calling the tools of an MCP server, one call per turn. "
    "When the task is complete, call `done` with your final answer."
)


class MCPTask(BaseModel):
    """One task: its instruction, and optionally the answer it expects and its reference calls."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task: str = Field(min_length=1)
    answer: str | None = None
    gold: tuple[ToolCall, ...] = ()


class MCPScore(BaseModel):
    """An episode's score: 1.0 iff the agent called ``done`` (with the expected answer, where one is given)."""

    reward: float
    termination: TerminationReason
    steps: int
    answer: str | None
    expected: str | None


def read_tasks(path: str | Path) -> list[MCPTask]:
    """The tasks of a JSONL file (ids ``task-N`` where a line has none); ConfigError naming a bad line."""
    tasks: list[MCPTask] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"--tasks {path}: cannot read it ({exc.strerror})") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            tasks.append(MCPTask.model_validate({"id": f"task-{number}", **record}))
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"--tasks {path}, line {number}: {exc}") from exc
    if not tasks:
        raise ConfigError(f"--tasks {path}: no tasks in it")
    return tasks


class MCPBench:
    """The ``mcp`` bench (see the module docstring)."""

    name = "mcp"
    default_split = "all"
    in_process = False

    def __init__(self, server: MCPServer, tasks: Sequence[MCPTask], *, sandbox: SandboxKind | None = None,
                 source: str | Path | None = None, trust_annotations: bool = False,
                 lookahead_timeout_s: float = LOOKAHEAD_TIMEOUT_S) -> None:
        if not tasks:
            raise ConfigError("--bench mcp needs a task: --task TEXT or --tasks FILE.jsonl")
        ids = [task.id for task in tasks]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"task ids must be unique: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
        if trust_annotations and sandbox is not None:
            raise ConfigError("trust_annotations is for a server outside a sandbox: with --mcp-sandbox every fork "
                              "runs its own copy of the server, so its read-only tools are speculated anyway")
        if not lookahead_timeout_s > 0:
            raise ConfigError(f"lookahead_timeout_s={lookahead_timeout_s}: a positive number of seconds")
        self.server = server
        self.sandbox = sandbox
        self.source = Path(source) if source is not None else None
        self.trust_annotations = trust_annotations
        self.lookahead_timeout_s = lookahead_timeout_s
        self.replaying = False
        """Set by :meth:`prepare_replay`: read-only calls in forks get ``lookahead_timeout_s`` and skip tools that
        hung."""
        self.slow_tools: set[str] = set()
        self._tasks = {task.id: task for task in tasks}
        self._tools = _in_thread(self._list_tools)

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None, *, mcp: str | None = None, mcp_url: str | None = None,
                      task: str | None = None, tasks: str | None = None, sandbox: str | None = None,
                      source: str | None = None, call_timeout_s: str | float | None = None,
                      trust_annotations: str | bool | None = None, lookahead_timeout_s: str | float | None = None,
                      **ignored: Any) -> MCPBench:
        """The bench as the CLI builds it, from its bench options (``--mcp``/``--mcp-url``, ``--task``/``--tasks``,
        ``--mcp-sandbox``; ``--bench-option source=DIR``, ``call_timeout_s=S``, ``trust_annotations=true`` and
        ``lookahead_timeout_s=S``)."""
        if (mcp is None) == (mcp_url is None):
            raise ConfigError("--bench mcp needs the server: --mcp 'COMMAND ARGS' (stdio) or --mcp-url URL, one of them")
        if (task is None) == (tasks is None):
            raise ConfigError("--bench mcp needs its task: --task TEXT or --tasks FILE.jsonl, one of them")
        if sandbox not in (None, *SANDBOX_KINDS):
            raise ConfigError(f"--mcp-sandbox {sandbox}: one of {', '.join(SANDBOX_KINDS)}")
        if sandbox is not None and mcp is None:
            raise ConfigError("--mcp-sandbox runs a stdio server (--mcp) inside the sandbox, not a URL")
        options: dict[str, Any] = {"call_timeout_s": float(call_timeout_s)} if call_timeout_s is not None else {}
        server = MCPServer.of_command_line(mcp, **options) if mcp is not None else MCPServer(url=mcp_url, **options)
        chosen = read_tasks(tasks) if tasks is not None else [MCPTask(id="task-1", task=task or "")]
        lookahead = _seconds("lookahead_timeout_s", lookahead_timeout_s, LOOKAHEAD_TIMEOUT_S)
        return cls(server, chosen, sandbox=sandbox, source=source,
                   trust_annotations=_flag("trust_annotations", trust_annotations), lookahead_timeout_s=lookahead)

    # --- tasks -----------------------------------------------------------------------

    def tasks(self, split: str = "all", task_ids: list[str] | None = None, limit: int | None = None) -> list[MCPTask]:
        if split != "all":
            raise ConfigError(f"unknown split {split!r} of {self.name}; it has one: all")
        chosen = [self.task(task_id) for task_id in task_ids] if task_ids else list(self._tasks.values())
        return chosen[:limit] if limit is not None else chosen

    def task(self, task_id: str) -> MCPTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise ConfigError(f"unknown task id {task_id!r} of {self.name}; known: {', '.join(self._tasks)}") from None

    # --- environment -----------------------------------------------------------------

    def toolkit(self) -> MCPBackend:
        """A fresh, unopened toolkit for the server."""
        if self.sandbox is not None:
            bound: dict[str, Any] = {"lookahead_timeout_s": self.lookahead_timeout_s} if self.replaying else {}
            return sandboxed_toolkit(self.server, self.sandbox, self.source, slow_tools=self.slow_tools, **bound)
        return MCPToolkit(self.server, trust_annotations=self.trust_annotations)

    def prepare_replay(self, command: str) -> None:
        """Ready the bench for ``command`` (``agentspec mine``, ``agentspec speculator fit``...), which replays the
        tasks' gold calls and runs probes and guesses in forks: one ConfigError line when the server is outside a
        sandbox (the replay would change the user's live server, and its forks share it), else read-only calls in
        forks get the ``lookahead_timeout_s`` bound (module docstring)."""
        if self.sandbox is None:
            raise ConfigError(
                f"{command} replays the tasks' gold calls to see what they return, and the MCP server "
                f"{self.server.label} runs outside a sandbox: they would change its live state. Give the server a "
                "sandbox whose trees are thrown away (--bench-option sandbox=overlay, or copy, docker) for a server "
                "whose state is files under its working directory, or leave the MCP bench out")
        self.replaying = True

    @asynccontextmanager
    async def open_backend(self, task: MCPTask, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        async with self.toolkit() as backend:
            yield backend

    async def _list_tools(self) -> list[ToolSpec]:
        async with self.toolkit() as backend:
            return backend.tool_specs()

    def tools(self, task: MCPTask, *, solo: bool) -> list[ToolSpec]:
        return [*self._tools, DONE_TOOL]

    def system_prompt(self, task: MCPTask, *, solo: bool) -> str:
        return f"{INSTRUCTIONS}\n\n<task>\n{task.task}\n</task>"

    # --- reference calls and mining ---------------------------------------------------

    def gold_actions(self, task: MCPTask) -> list[tuple[Requestor, ToolCall]]:
        return [("assistant", call) for call in task.gold]

    def distractors(self) -> list[ToolCall]:
        return distractors(call for task in self._tasks.values() for call in task.gold)

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        return []

    # --- scoring ---------------------------------------------------------------------

    async def evaluate(self, task: MCPTask, steps: Sequence[Step], termination: TerminationReason, *, solo: bool,
                       live: SnapshotBackend, final: dict[str, Any] | None = None) -> MCPScore:
        """1.0 iff the agent ended the task itself, and its answer holds ``task.answer`` where there is one."""
        answer = (final or {}).get("answer")
        text = str(answer) if answer is not None else None
        solved = termination is TerminationReason.AGENT_STOP and (
            task.answer is None or (text is not None and task.answer.lower() in text.lower()))
        return MCPScore(reward=1.0 if solved else 0.0, termination=termination, steps=len(steps), answer=text,
                        expected=task.answer)


def _flag(name: str, value: str | bool | None) -> bool:
    """A yes/no bench option (``true``/``false``, ``1``/``0``, ``yes``/``no``); ConfigError for anything else."""
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"--bench-option {name}={value}: true or false")


def _seconds(name: str, value: str | float | None, default: float) -> float:
    """A positive number of seconds from a bench option; ConfigError naming it for anything else."""
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"--bench-option {name}={value}: a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"--bench-option {name}={value}: a positive number of seconds")
    return seconds


def _in_thread(work: Any) -> Any:
    """Run async ``work`` to completion in a thread of its own (the bench is built inside or outside a loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, work).result()
