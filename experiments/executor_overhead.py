"""Executor overhead per step with zero-latency models, side by side with plain tool execution.

Zero-latency oracle authority and (for sa) a perfect zero-latency speculator, no latency model, on the tau2
base split.  Overhead per step = (executor time - the same calls executed directly on an environment) / steps.
Also reports the fork cost (snapshot + restore) of the tau2 environment.  Prints one JSON object.

    python experiments/executor_overhead.py --data-dir ../shared/data/tau2
"""

from __future__ import annotations

import argparse
import json
import time

import anyio

from agentspec.assembly import Parts, build_loop
from agentspec.bench.registry import open_bench
from agentspec.bench.tau2.harness import Tau2Bench
from agentspec.run_spec import RunSpec
from agentspec.runtime.policies.scripted import NoisyOracleSpeculator, OracleAuthority
from agentspec.snapshot import InProcessBackend


def direct_seconds(bench: Tau2Bench, tasks: list) -> tuple[float, int]:
    envs = [bench.environment(task, solo=True) for task in tasks]
    steps = 0
    started = time.perf_counter()
    for env, task in zip(envs, tasks, strict=True):
        for call in bench.gold_calls(task):
            env.execute(call, "assistant")
            steps += 1
    return time.perf_counter() - started, steps


async def executor_seconds(bench: Tau2Bench, tasks: list, mode: str) -> float:
    envs = [bench.environment(task, solo=True) for task in tasks]
    spec = RunSpec.of(bench="tau2-telecom", agent="oracle", solo=True, modes=mode, speculator_model="noisy-oracle:1")
    total = 0.0
    for env, task in zip(envs, tasks, strict=True):
        gold = bench.gold_calls(task)
        speculator = NoisyOracleSpeculator(gold, 1.0, [], task_id=task.id) if mode != "sequential" else None
        loop = build_loop(spec, spec.modes[0], InProcessBackend(env), Parts(OracleAuthority(gold), speculator))
        started = time.perf_counter()
        await loop.run()
        total += time.perf_counter() - started
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bench = open_bench("tau2-telecom", args.data_dir)
    assert isinstance(bench, Tau2Bench)
    tasks = bench.tasks("base")
    env = bench.environment(tasks[0], solo=True)
    snap = env.snapshot()
    started = time.perf_counter()
    for _ in range(200):
        env.restore(env.snapshot())
    fork_us = (time.perf_counter() - started) / 200 * 1e6
    result: dict = {"tasks": len(tasks), "fork_us": round(fork_us, 1), "state_bytes": len(snap.data)}
    for mode in ("sequential", "sa"):
        best = None
        for _ in range(args.rounds):  # best of N rounds: the machine is noisy
            base, steps = direct_seconds(bench, tasks)
            loop = anyio.run(executor_seconds, bench, tasks, mode)
            per_step = (loop - base) / steps * 1e6
            best = per_step if best is None else min(best, per_step)
        result[f"{mode}_overhead_us_per_step"] = round(best, 1)
    result["steps"] = steps
    result["note"] = "sa overhead includes one fork per drafted step (snapshot + restore), plus the speculator and commit"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
