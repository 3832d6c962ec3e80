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

from agentspec.bench.registry import bench_class, data_spec
from agentspec.bench.runner import run_jobs, summarize
from agentspec.data import pull, resolve_data_dir
from agentspec.errors import ConfigError, ModelRequestError, ModelUnavailable
from agentspec.models import ModelClient, ModelConfig
from agentspec.types import ToolCall


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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read actions file {path}: {exc.strerror}") from exc
    try:
        return _ACTIONS.validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise ConfigError(f"{path} is not a valid actions file: at {where}: {first['msg']}") from exc


def _read_batch(path: str) -> list[BatchRecord]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read batch file {path}: {exc.strerror}") from exc
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
    bench = bench_class(args.bench).from_data_dir(args.data_dir)
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


def _role_config(args: argparse.Namespace, role: str, env_role: str) -> ModelConfig | None:
    spec = getattr(args, f"{role}_model")
    base_url = getattr(args, f"{role}_base_url")
    if spec is None and base_url is None:
        import os

        if not os.environ.get(f"AGENTSPEC_{env_role.upper()}_MODEL") and not os.environ.get(
            f"AGENTSPEC_{env_role.upper()}_BASE_URL"
        ):
            return None
    overrides = {"temperature": args.temperature} if args.temperature is not None else {}
    return ModelConfig.for_role(env_role, spec, base_url=base_url, **overrides)


async def _preflight(client: ModelClient) -> None:
    """Fail the run at once, with a clear message, when an endpoint is dead or the model unknown."""
    try:
        if client.config.model:
            await client.list_models()
        else:
            await client.resolve_model()
    except ModelRequestError:
        pass  # some endpoints do not serve /models; the first real request will tell
    except ModelUnavailable as exc:
        raise ModelUnavailable(f"model endpoint {client.config.base_url} is not answering: {exc}") from exc


async def _embedded_configs(
    stack: AsyncExitStack, args: argparse.Namespace, user_config: ModelConfig | None
) -> tuple[ModelConfig, ModelConfig | None]:
    """No agent endpoint given: serve the default local models from a child ``agentspec serve`` for this run."""
    from agentspec.models.embedded import DEFAULT_MODELS, embedded_server

    roles = ["agent"] + ([] if args.solo or user_config is not None else ["user"])
    served = await stack.enter_async_context(embedded_server([DEFAULT_MODELS[role] for role in roles]))
    overrides = {"temperature": args.temperature} if args.temperature is not None else {}

    def config(role: str) -> ModelConfig:
        # CPU generation is slow: a long timeout, and no retry that would redo a long generation.
        model = served.model_ids[DEFAULT_MODELS[role]]
        return ModelConfig(base_url=served.base_url, model=model, timeout_s=3600, max_retries=0, **overrides)

    return config("agent"), config("user") if "user" in roles else user_config


async def _run_llm(bench: Any, args: argparse.Namespace, jobs: list[tuple[Any, int]]) -> list[Any]:
    agent_config = _role_config(args, "agent", "agent")
    user_config = None if args.solo else _role_config(args, "user", "user")
    if agent_config is not None and not args.solo and user_config is None:
        raise ConfigError("normal mode needs --user-model (or AGENTSPEC_USER_MODEL); or pass --solo")
    async with AsyncExitStack() as stack:
        if agent_config is None:
            agent_config, user_config = await _embedded_configs(stack, args, user_config)
        agent_client = await stack.enter_async_context(ModelClient(agent_config))
        user_client = await stack.enter_async_context(ModelClient(user_config)) if user_config else None
        for client in filter(None, (agent_client, user_client)):
            await _preflight(client)

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


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "mode", None):
        from agentspec.bench.speculative import speculative_run_command

        return speculative_run_command(args)
    if args.trials < 1 or args.concurrency < 1 or (args.limit is not None and args.limit < 0):
        raise ConfigError("--trials and --concurrency must be >= 1 and --limit >= 0")
    bench = bench_class(args.bench).from_data_dir(args.data_dir, max_steps=args.max_steps, max_errors=args.max_errors)
    task_ids = [t.strip() for t in args.task_ids.split(",") if t.strip()] if args.task_ids else None
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
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        results = {"summary": summary, "episodes": [e.record() for e in episodes]}
        (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        summary["results"] = str(out / "results.json")
    return summary


# --- data ---------------------------------------------------------------------------


def data_command(args: argparse.Namespace) -> dict[str, Any]:
    spec = data_spec(args.bench)
    if args.data_command == "path":
        return {"bench": args.bench, "data_dir": str(resolve_data_dir(spec, args.data_dir))}
    checkout = Path(args.from_checkout) if args.from_checkout else None
    wheel = Path(args.wheel) if args.wheel else None
    target = pull(spec, checkout=checkout, wheel=wheel)
    return {"bench": args.bench, "data_dir": str(target), "files": len(spec.files), "verified": True}
