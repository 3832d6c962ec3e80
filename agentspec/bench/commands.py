"""What ``agentspec run``, ``evaluate`` and ``data`` do, behind the argument parser."""

from __future__ import annotations

import argparse
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from agentspec.bench.registry import bench_data, data_spec, open_bench, setup_bench
from agentspec.bench.roles import open_clients, plan_roles
from agentspec.bench.runner import raise_if_endpoint_dead, run_jobs, summarize
from agentspec.data import pull, resolve_data_dir
from agentspec.errors import ConfigError
from agentspec.report.load import RESULTS_FORMAT
from agentspec.run_spec import role_given
from agentspec.types import ToolCall
from agentspec.user_files import out_dir, read_user_file


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


# --- evaluate -----------------------------------------------------------------------


async def _evaluate_one(bench: Any, task_id: str, actions: list[ActionSpec], end: str) -> dict[str, Any]:
    task = bench.task(task_id)
    calls = [(a.requestor, ToolCall(name=a.name, arguments=a.arguments)) for a in actions]
    agent, user = bench.scripted(calls, end="assistant" if end == "agent" else "user", solo=False)
    episode = await bench.run_episode(task, agent, user, env=bench.environment(task, solo=False))
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


def evaluate_command(args: argparse.Namespace) -> dict[str, Any] | None:
    bench = open_bench(args.bench, args.data_dir)
    if not hasattr(bench, "scripted"):
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


# --- run ----------------------------------------------------------------------------


async def _run_llm(bench: Any, args: argparse.Namespace, jobs: list[tuple[Any, int]]) -> list[Any]:
    from agentspec.models.embedded import DEFAULT_MODELS

    # Nothing named for the agent: serve the default local models for this run (the user too, unless solo).
    agent_embedded = not role_given(args, "agent")
    roles: dict[str, str | None] = {"agent": DEFAULT_MODELS["agent"]}
    if not args.solo:
        roles["user"] = DEFAULT_MODELS["user"] if agent_embedded else None
    plan = plan_roles(args, roles)
    if not args.solo and "user" not in plan.endpoints and "user" not in plan.embedded:
        raise ConfigError("normal mode needs --user-model (or AGENTSPEC_USER_MODEL); or pass --solo")
    async with AsyncExitStack() as stack:
        clients = await open_clients(stack, args, plan)
        agent_client, user_client = clients["agent"], clients.get("user")

        async def one(job: tuple[Any, int]) -> Any:
            task, trial = job
            env = bench.environment(task, solo=args.solo)
            agent, user = bench.llm_parties(task, agent_client, user_client, solo=args.solo, env=env)
            return await bench.run_episode(task, agent, user, env=env, trial=trial)

        return await run_jobs(jobs, one, concurrency=args.concurrency, progress=not args.no_progress)


async def _run_oracle(bench: Any, args: argparse.Namespace, jobs: list[tuple[Any, int]]) -> list[Any]:
    async def one(job: tuple[Any, int]) -> Any:
        task, trial = job
        agent, user = bench.oracle(task, solo=True)
        return await bench.run_episode(task, agent, user, env=bench.environment(task, solo=True), trial=trial)

    return await run_jobs(jobs, one, concurrency=args.concurrency, progress=not args.no_progress)


def plain_run_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec run`` without ``--mode``: tau2's own episode loop (the reference the modes are compared with)."""
    out = out_dir(args.out)
    bench = open_bench(args.bench, args.data_dir, max_steps=args.max_steps, max_errors=args.max_errors)
    if not hasattr(bench, "run_episode"):
        raise ConfigError(f"{args.bench} runs through the executor: give --mode (e.g. --mode sequential)")
    task_ids = [t.strip() for t in args.task_ids.split(",") if t.strip()] if args.task_ids else None
    args.split = args.split or bench.default_split
    tasks = bench.tasks(args.split, task_ids, args.limit)
    jobs = [(task, trial) for trial in range(args.trials) for task in tasks]
    agent_kind = args.agent or ("llm" if (args.agent_model or args.agent_base_url) else None)
    if agent_kind is None:
        raise ConfigError(
            "say which agent to run: --agent oracle, --agent llm (local models, served for the run), "
            "or --agent-model URL_OR_NAME for an LLM agent"
        )
    started = time.perf_counter()
    runner = _run_oracle if agent_kind == "oracle" else _run_llm
    episodes = anyio.run(runner, bench, args, jobs)
    summary = {"bench": args.bench, "split": args.split if not task_ids else "task-ids", "agent": agent_kind}
    summary |= summarize(episodes, time.perf_counter() - started)
    summary |= data_summary(args)  # in results.json too, as a --mode run writes it
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        results = {"format": RESULTS_FORMAT, "summary": summary, "episodes": [e.record() for e in episodes]}
        (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        summary["results"] = str(out / "results.json")
        if args.report:
            from agentspec.report.command import report_after_run

            summary["report"] = report_after_run(out)
    raise_if_endpoint_dead(episodes)
    return summary


def data_summary(args: argparse.Namespace) -> dict[str, Any]:
    """``data_verified`` and the data files' sha256 for a bench whose data agentspec verifies, as a ``--mode`` run
    reports them (:func:`agentspec.bench.registry.bench_data`); nothing for a bench without pinned data."""
    return bench_data(args.bench, args.data_dir, unverified=getattr(args, "unverified_data", False)) or {}


# --- score --------------------------------------------------------------------------


def score_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec score``: a submission file scored by the bench's own scorer (GAIA's official rules)."""
    bench = open_bench(args.bench, args.data_dir)
    if not hasattr(bench, "score_answers"):
        raise ConfigError(f"{args.bench} has no answers to score against: agentspec score is for benches like gaia")
    return {"bench": args.bench, **bench.score_answers(args.answers, split=args.split or bench.default_split)}


# --- bench setup --------------------------------------------------------------------


def setup_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec bench setup NAME``: the bench's own setup (AppWorld's venv); its summary."""
    return setup_bench(args.name, args)


# --- tasks --------------------------------------------------------------------------


def tasks_command(args: argparse.Namespace) -> list[str] | None:
    """``agentspec tasks``: the split's task ids, one per line, or (``--json``) one JSON list as the last line."""
    bench = open_bench(args.bench, args.data_dir)
    ids = [task.id for task in bench.tasks(args.split or bench.default_split)]
    if args.json:
        return ids
    for task_id in ids:
        print(task_id)
    return None


# --- data ---------------------------------------------------------------------------


def data_command(args: argparse.Namespace) -> dict[str, Any]:
    spec = data_spec(args.bench)
    if args.data_command == "path":
        return {"bench": args.bench, "data_dir": str(resolve_data_dir(spec, args.data_dir))}
    checkout = Path(args.from_checkout) if args.from_checkout else None
    wheel = Path(args.wheel) if args.wheel else None
    target = pull(spec, checkout=checkout, wheel=wheel)
    return {"bench": args.bench, "data_dir": str(target), "files": len(spec.files), "verified": True}
