"""``agentspec evaluate``: score a given sequence of tool calls, played through the executor in sequential mode as
any run is (the parser is :mod:`agentspec.cli.evaluate`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agentspec.assembly import Parts, run_episode
from agentspec.bench.episode import Episode
from agentspec.bench.protocol import Bench
from agentspec.bench.registry import open_bench
from agentspec.errors import ConfigError
from agentspec.run_spec import RunSpec
from agentspec.runtime.conversation import User
from agentspec.runtime.policies.protocol import Policy
from agentspec.types import Requestor, ToolCall
from agentspec.user_files import read_user_file


class ActionSpec(BaseModel):
    """One call in an ``--actions`` file."""

    model_config = ConfigDict(extra="forbid")

    requestor: Literal["assistant", "user"]
    name: str
    arguments: dict[str, Any] = {}


class BatchRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    actions: list[ActionSpec]
    end: Literal["agent", "user"] = "agent"


_ACTIONS = TypeAdapter(list[ActionSpec])


def _read_actions(path: str) -> list[ActionSpec]:
    text = read_user_file(path, "actions file")
    try:
        return _ACTIONS.validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise ConfigError(f"{path} is not a valid actions file: at {where}: {first['msg']}") from exc


def _read_batch(path: str) -> list[BatchRecord]:
    lines = read_user_file(path, "batch file").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(BatchRecord.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(f"{path} line {number}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
    return records


async def play_script(bench: ScriptedEpisodes, task: Any, calls: Sequence[tuple[Requestor, ToolCall]], *,
                      end: Requestor = "assistant", solo: bool = False) -> Episode:
    """Play ``calls`` on ``task`` through the executor in sequential mode, as any run goes (the bench's scripted
    authority and user, :meth:`~agentspec.bench.tau2.harness.Tau2Bench.scripted`), scored by the bench; a failure is
    recorded in the episode, not raised."""
    spec = RunSpec.of(bench=bench.name, agent="oracle", modes="sequential", solo=solo, max_steps=bench.max_steps,
                      max_errors=bench.max_errors)
    authority, user = bench.scripted(calls, end=end, solo=solo)
    return await run_episode(spec, spec.modes[0], bench, task, Parts(authority, user=user))


async def _evaluate_one(bench: ScriptedEpisodes, task_id: str, actions: list[ActionSpec], end: str) -> dict[str, Any]:
    task = bench.task(task_id)
    calls: list[tuple[Requestor, ToolCall]] = [(a.requestor, ToolCall(name=a.name, arguments=a.arguments)) for a in actions]
    episode = await play_script(bench, task, calls, end="assistant" if end == "agent" else "user")
    evaluation = episode.evaluation.model_dump(mode="json") if episode.evaluation else {}
    return {
        "task_id": task_id,
        "reward": episode.reward,
        "termination": episode.record()["termination"],
        "steps": episode.trajectory.steps,
        "num_errors": episode.trajectory.num_errors,
        "env_assertions": evaluation.get("env_assertions", []),
        "actions": evaluation.get("actions", []),
        "error": episode.error,
    }


@runtime_checkable
class ScriptedEpisodes(Bench[Any], Protocol):
    """A bench that scores a given list of calls (tau2's evaluator): a scripted authority and user for them, and
    the step and error limits its episodes run under.  What ``agentspec evaluate`` needs."""

    max_steps: int
    max_errors: int

    def scripted(self, calls: Sequence[tuple[Requestor, ToolCall]], *, end: Requestor = ...,
                 solo: bool = ...) -> tuple[Policy, User | None]: ...


def evaluate_command(args: argparse.Namespace) -> dict[str, Any] | None:
    bench = open_bench(args.bench, args.data_dir)
    if not isinstance(bench, ScriptedEpisodes):
        raise ConfigError(f"agentspec evaluate scores tau2 benches; {args.bench} is scored by its runs (agentspec run)")
    if args.batch:
        records = _read_batch(args.batch)
        for record in records:
            bench.task(record.task_id)  # fail on an unknown id before printing anything
        for record in records:
            print(json.dumps(anyio.run(_evaluate_one, bench, record.task_id, record.actions, record.end)), flush=True)
        return None
    if not args.task_id or not args.actions:
        raise ConfigError("evaluate needs --task-id and --actions (or --batch FILE.jsonl)")
    actions = _read_actions(args.actions)
    bench.task(args.task_id)
    return anyio.run(_evaluate_one, bench, args.task_id, actions, args.end)
