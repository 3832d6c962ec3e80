"""``agentspec run --mode ...``: tau2 tasks through the speculative executor, one or several modes per run.

With ``--mode sequential,sa,smc`` every mode runs over the same tasks in the
same process, so their ratios are measured side by side.  The last stdout
line (and ``results.json``'s ``summary``) holds the run's settings, each
mode's figures under ``modes`` (a dict by mode, also for a single mode),
``speedup_vs_sequential`` (mean task wall time of sequential over the mode's,
when sequential ran) and ``run_wall_s`` (the whole run); no mode's figure
sits at top level::

    {"bench": "tau2-telecom", "modes": {"sequential": {...}, "sa": {...}},
     "speedup_vs_sequential": {"sequential": 1.0, "sa": 1.41}, "run_wall_s": 3.2, ...}
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from agentspec.user_files import out_dir, read_user_file
from agentspec.bench.registry import bench_class, shipped_macros
from agentspec.bench.roles import open_clients, plan_roles, role_given
from agentspec.bench.runner import raise_if_endpoint_dead, run_jobs, summarize
from agentspec.cli.flags import noisy_oracle_p
from agentspec.errors import ConfigError
from agentspec.macros import MacroLibrary
from agentspec.models import ModelClient
from agentspec.report.load import RESULTS_FORMAT
from agentspec.runtime.executor import MODES, ExecutorConfig, parse_mode
from agentspec.runtime.latency import LatencyModel
from agentspec.runtime.metrics import ExecutionMetrics, aggregate
from agentspec.runtime.policies import LLMPolicy, NoisyOracleSpeculator, OracleAuthority, Policy
from agentspec.runtime.probe import FENCED_OPENING, HERMES_OPENING, LLMProber, Prober, SimulatedProber
from agentspec.runtime.runlog import RunLog, TaskLog
from agentspec.runtime.simulated import SimulatedLatency, SimulatedProbeLatency
from agentspec.runtime.spork import SporkConfig

@dataclass
class LoggedEpisode:
    """An episode finished by an earlier (interrupted) run, read back from the run log."""

    task_id: str
    reward: float
    error: str | None
    stored: dict[str, Any]

    def record(self) -> dict[str, Any]:
        return self.stored


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes:
        raise ConfigError(f"unknown mode {text!r}; choose from {', '.join(MODES)}, spork or X+spork")
    for mode in modes:
        parse_mode(mode)
    return modes


class _Setup:
    """Everything a speculative run needs, validated before any task starts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.modes = _modes(args.mode)
        self.oracle = args.agent == "oracle"
        if not self.oracle and not args.solo:
            raise ConfigError("speculative execution runs solo-mode episodes: add --solo (or use --agent oracle)")
        self.noisy_p = noisy_oracle_p(args.speculator_model)
        if self.noisy_p is not None and not self.oracle:
            raise ConfigError("noisy-oracle speculators need the gold calls: use them with --agent oracle")
        self.needs_speculator = any(parse_mode(m)[0] != "sequential" for m in self.modes)
        if self.needs_speculator and self.noisy_p is None and not role_given(args, "speculator"):
            raise ConfigError("modes sa and smc need --speculator-model (a model, or noisy-oracle:P with --agent oracle)")
        self.latency = LatencyModel.load(args.latency_model) if args.latency_model else None
        # smc without a library would quietly be sa: take the bench's shipped library, and say so in the summary.
        uses_macros = any(parse_mode(m)[0] == "smc" for m in self.modes)
        self.macros_path = args.macros or (str(shipped_macros(args.bench)) if uses_macros else None)
        self.macros = MacroLibrary.load(self.macros_path) if self.macros_path else None
        simulated_only = self.oracle and (self.noisy_p is not None or not self.needs_speculator)
        self.virtual_clock = self.latency is not None and simulated_only
        if args.resume and not args.out:
            raise ConfigError("--resume needs --out DIR (the run log lives there)")
        self.out = out_dir(args.out)
        for written in (args.timeline, args.macros_out):  # files written after the run: refuse a bad path before it
            if written and Path(written).is_dir():
                raise ConfigError(f"{written} is a folder: give a file name")
            if written:
                out_dir(str(Path(written).parent))


async def _run_mode(setup: _Setup, bench: Any, mode: str, jobs: list[tuple[Any, int]], clients: dict[str, ModelClient | None]) -> list[Any]:
    args = setup.args
    base_mode, spork = parse_mode(mode)
    config = ExecutorConfig(mode=base_mode, depth=args.depth, l_min=args.l_min, seed=args.seed,  # type: ignore[arg-type]
                            max_calls=max(1, (args.max_steps - 1) // 2), max_errors=args.max_errors,
                            verify_macros=args.verify_macros)
    log_path = setup.out / f"run-{mode}.log.jsonl" if setup.out else None
    previous = RunLog.read(log_path) if (log_path and args.resume) else {}
    if log_path and not args.resume and log_path.exists():
        log_path.unlink()
    log = RunLog(log_path) if log_path else None
    distractors = bench.distractors() if setup.noisy_p is not None else []
    tools = bench.solo_tools()

    spork_config = SporkConfig(gate=args.gate, probe_every=args.probe_every, cost_model=not args.no_cost_model)
    spork_distractors = bench.distractors() if spork and setup.oracle else []
    # Oracles are simulated models: their time is the latency model's (none without one; they still stream,
    # so SPORK probes them once per decision).
    simulated_time = setup.latency or LatencyModel()

    def prober(task: Any) -> Prober | None:
        if not spork:
            return None
        if setup.oracle:
            return SimulatedProbeLatency(SimulatedProber(bench.gold_calls(task), args.probe_accuracy, spork_distractors,
                                                         task_id=task.id, seed=args.seed), simulated_time)
        opening = HERMES_OPENING if args.probe_opening == "hermes" else FENCED_OPENING
        return LLMProber.of(authority_policy(task), opening=opening)

    def authority_policy(task: Any) -> LLMPolicy:
        return LLMPolicy(clients["agent"], bench.agent_prompt(task, solo=True), tools,  # type: ignore[arg-type]
                         tool_choice="auto" if args.answer_prefix else "required", answer_prefix=args.answer_prefix)

    def policies(task: Any) -> tuple[Policy, Policy | None]:
        gold = bench.gold_calls(task)
        if setup.oracle:
            authority: Policy = SimulatedLatency(OracleAuthority(gold), simulated_time, "authority", args.probe_every)
        else:
            authority = authority_policy(task)
        if base_mode == "sequential":
            return authority, None
        if setup.noisy_p is not None:
            noisy = NoisyOracleSpeculator(gold, setup.noisy_p, distractors, task_id=task.id, seed=args.seed)
            return authority, SimulatedLatency(noisy, simulated_time, "speculator")
        prompt = bench.agent_prompt(task, solo=True)
        return authority, LLMPolicy(clients["speculator"], prompt, tools, queue_extra_calls=False)  # type: ignore[arg-type]

    async def one(job: tuple[Any, int]) -> Any:
        task, trial = job
        logged: TaskLog | None = previous.get(f"{task.id}#{trial}")
        if logged is not None and logged.result is not None:
            stored = logged.result
            return LoggedEpisode(task.id, stored["reward"], stored.get("error"), stored)
        authority, speculator = policies(task)
        episode = await bench.run_speculative_episode(
            task, authority, speculator, config=config, macros=setup.macros, latency=setup.latency,
            log=log, resumed=logged, trial=trial, prober=prober(task), spork=spork_config,
        )
        if log is not None:
            log.finish(f"{task.id}#{trial}", episode.record())
        return episode

    try:
        return await run_jobs(jobs, one, concurrency=args.concurrency, progress=not args.no_progress, label=mode)
    finally:
        if log is not None:
            log.close()


def _metrics_of(episodes: list[Any]) -> list[ExecutionMetrics]:
    out = []
    for episode in episodes:
        execution = episode.record().get("execution") or {}
        out.append(ExecutionMetrics(**execution.get("metrics", {})))
    return out


def _mode_summary(episodes: list[Any], wall_s: float) -> dict[str, Any]:
    """One mode's figures (``wall_s`` is that mode's share of the run)."""
    return summarize(episodes, wall_s) | aggregate(_metrics_of(episodes))


async def _main(setup: _Setup, bench: Any, jobs: list[tuple[Any, int]]) -> dict[str, dict[str, Any]]:
    from agentspec.models.embedded import DEFAULT_MODELS

    args = setup.args
    roles: dict[str, str | None] = {}
    if not setup.oracle:
        roles["agent"] = DEFAULT_MODELS["agent"]  # --agent llm with no model named: the default local model
    if setup.needs_speculator and setup.noisy_p is None:
        roles["speculator"] = None
    plan = plan_roles(args, roles)
    async with AsyncExitStack() as stack:
        clients: dict[str, ModelClient | None] = {"agent": None, "speculator": None}
        clients |= await open_clients(stack, args, plan)
        results: dict[str, dict[str, Any]] = {}
        for mode in setup.modes:
            started = time.perf_counter()
            episodes = await _run_mode(setup, bench, mode, jobs, clients)
            results[mode] = {"summary": _mode_summary(episodes, time.perf_counter() - started), "episodes": episodes}
        return results


def _baseline_wall(path: Path) -> tuple[Path, str | None, dict[str, Any]]:
    """The baseline run's file, the mode it is compared as, and that mode's figures.

    A ``--mode`` run's results.json has ``summary.modes``: its only mode, or
    its ``sequential`` mode when it ran several.
    """
    file = path / "results.json" if path.is_dir() else path
    try:
        summary = json.loads(read_user_file(file, "--baseline"))["summary"]
        modes = summary["modes"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(f"--baseline {path}: not a results.json of an agentspec run --mode ({type(exc).__name__}: {exc})") from exc
    mode = next(iter(modes)) if len(modes) == 1 else "sequential" if "sequential" in modes else None
    if mode is None or not modes[mode].get("mean_task_wall_s"):
        raise ConfigError(f"--baseline {path}: no single mode (or sequential) with a mean_task_wall_s to compare with")
    return file, mode, modes[mode]


def _against_baseline(path: Path, summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean task wall time of the baseline run over each mode's (> 1: this run is faster)."""
    file, base_mode, base = _baseline_wall(path)
    base_wall = base["mean_task_wall_s"]
    ratios = {mode: round(base_wall / s["mean_task_wall_s"], 4) for mode, s in summaries.items() if s.get("mean_task_wall_s")}
    return {"baseline": str(file), "baseline_mode": base_mode, "baseline_mean_task_wall_s": base_wall,
            "speedup": ratios, "reward_delta": {m: s["reward_mean"] - base.get("reward_mean", 0.0) for m, s in summaries.items()}}


def _speedups(summaries: dict[str, dict[str, Any]]) -> dict[str, float | None] | None:
    """Mean task wall time of sequential over each mode's; None when sequential did not run (or ran no task)."""
    base = summaries.get("sequential", {}).get("mean_task_wall_s")
    if not base:
        return None
    return {mode: round(base / s["mean_task_wall_s"], 4) if s.get("mean_task_wall_s") else None for mode, s in summaries.items()}


def speculative_run_command(args: argparse.Namespace) -> dict[str, Any]:
    setup = _Setup(args)
    bench = bench_class(args.bench).from_data_dir(args.data_dir, max_steps=args.max_steps, max_errors=args.max_errors)
    task_ids = [t.strip() for t in args.task_ids.split(",") if t.strip()] if args.task_ids else None
    tasks = bench.tasks(args.split, task_ids, args.limit)
    jobs = [(task, trial) for trial in range(args.trials) for task in tasks]
    started = time.perf_counter()
    if setup.virtual_clock:
        from trio.testing import MockClock

        results = anyio.run(_main, setup, bench, jobs, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    else:
        results = anyio.run(_main, setup, bench, jobs)
    summaries = {mode: r["summary"] for mode, r in results.items()}
    summary: dict[str, Any] = {"bench": args.bench, "split": args.split if not task_ids else "task-ids",
                               "agent": "oracle" if setup.oracle else "llm", "speculator": args.speculator_model,
                               "tasks": len(tasks), "trials": args.trials}
    summary["clock"] = "virtual (trio MockClock, autojump)" if setup.virtual_clock else "wall"
    summary["latency_model"] = setup.latency.name if setup.latency else None
    summary["macros"] = setup.macros_path
    summary["modes"] = summaries
    summary["speedup_vs_sequential"] = _speedups(summaries)
    summary["run_wall_s"] = round(time.perf_counter() - started, 3)
    if args.baseline:
        summary["vs_baseline"] = _against_baseline(Path(args.baseline), summaries)
    if args.macros_out and setup.macros is not None:
        summary["macros_out"] = args.macros_out  # in results.json too: a report shows the library after the run
    if setup.out:
        setup.out.mkdir(parents=True, exist_ok=True)
        dump = {"format": RESULTS_FORMAT, "summary": summary, "episodes": {m: [e.record() for e in r["episodes"]] for m, r in results.items()}}
        (setup.out / "results.json").write_text(json.dumps(dump, indent=1), encoding="utf-8")
        summary["results"] = str(setup.out / "results.json")
    raise_if_endpoint_dead([e for r in results.values() for e in r["episodes"]])
    if args.macros_out and setup.macros is not None:
        setup.macros.provenance["online_updates"] = {"runs": setup.modes, "split": args.split}
        setup.macros.save(args.macros_out)
    if args.report and setup.out:  # after the library is saved: the report reads it back
        from agentspec.report.command import report_after_run

        summary["report"] = report_after_run(setup.out)
    if args.timeline:
        from agentspec.runtime.timeline import plot_timeline

        episode = results[setup.modes[-1]]["episodes"][0].record()
        plot_timeline(episode["execution"]["timeline"], Path(args.timeline), title=f"{episode['task_id']} ({setup.modes[-1]})")
        summary["timeline"] = args.timeline
    return summary
