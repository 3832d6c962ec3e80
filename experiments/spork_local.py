"""SPORK with a real local model: tau2-telecom (or GAIA) solo episodes, sequential vs spork in one run.  Prints JSON.

The authority is a local model behind ``agentspec serve --decoder toolspec``
(a child process, or ``--base-url`` for a server you run), asked to write one
sentence of reasoning before each call (``tool_choice: auto``), so there is
decoding a probe can overtake (each answer is started as ``Thought:`` and continued
by the server, the way a reasoning model opens ``<think>``).  Tools take ``--tool-latency`` seconds (a
latency floor, as SPORK's evaluation used).  Every task runs once per mode,
the modes alternating which goes first, after a warm-up episode that puts
every turn's prompt in the prefix cache (so neither mode pays the other's prefill).

    python experiments/spork_local.py --data-dir ../shared/data/tau2 --limit 4
    python experiments/spork_local.py --bench gaia --data-dir tests/data/gaia-format --backend overlay --limit 6

Reported: task wall time per mode (mean, P50, P95) and their ratio; probe hit
rates of tool names and of whole calls; early dispatches, SPORK commits and
overlapped tool time; cached prompt tokens of the probes (the prefix cache
shares the authority's prompt and partial answer); probe texts forwarded to
the authority's decoder as draft hints and the tokens it accepted from them;
whether both modes made the same calls (they must: greedy decoding, and a
probe changes nothing but timing).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentspec.assembly import assemble, run_episode  # noqa: E402
from agentspec.bench.registry import open_bench  # noqa: E402
from agentspec.models import ModelClient  # noqa: E402
from agentspec.roles import open_roles  # noqa: E402
from agentspec.run_spec import RunSpec, SporkSettings  # noqa: E402
from agentspec.runtime.latency import LatencyModel, ToolLatency  # noqa: E402
from agentspec.stats import percentile  # noqa: E402

THINK = ("Before each tool call, write one short sentence saying what you will check or do and why; "
         "then write the call.")


async def server_stats(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        data = (await http.get(base_url.removesuffix("/v1") + "/stats")).json()
    return next(iter(data.values()))


async def episode(bench: Any, task: Any, client: ModelClient, args: argparse.Namespace, spork: bool) -> dict[str, Any]:
    spec = RunSpec.of(
        bench=args.bench, agent="llm", solo=True, modes="spork" if spork else "sequential", instructions=THINK,
        answer_prefix=args.answer_prefix, max_tokens=args.max_tokens, max_calls=args.max_calls, max_errors=2,
        latency_model=LatencyModel(name="tool-floor", tool=ToolLatency(fixed_s=args.tool_latency)),
        spork=SporkSettings(gate=args.gate, probe_every=args.probe_every, cost_model=not args.no_cost_model,
                            probe_tokens=args.probe_tokens),
    )
    mode = spec.modes[0]
    parts = assemble(spec, mode, bench, task, {"agent": client}, solo=True)
    result = await run_episode(spec, mode, bench, task, parts)
    record = result.record()
    execution = record.get("execution") or {}
    calls = [[(c.name, c.arguments) for c in m.tool_calls] for m in result.trajectory.messages if m.tool_calls]
    return {"task": task.id, "wall_s": result.timings["wall_s"], "reward": record.get("reward"),
            "error": record.get("error"), "metrics": execution.get("metrics", {}), "calls": calls,
            "cost_model": execution.get("spork_cost_model")}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    total = {key: sum(r["metrics"].get(key, 0) for r in runs) for key in (
        "probes", "probe_hits", "probe_name_hits", "early_dispatches", "commits_spork", "time_overlapped_s",
        "probe_prompt_tokens", "probe_cached_tokens", "authority_calls", "live_executions", "wasted_tool_calls")}
    return {"mean_task_wall_s": round(sum(walls) / len(walls), 2), "p50_s": round(percentile(walls, 0.5), 2),
            "p95_s": round(percentile(walls, 0.95), 2), "reward_mean": sum(r["reward"] or 0 for r in runs) / len(runs),
            **{k: round(v, 2) if isinstance(v, float) else v for k, v in total.items()}}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bench = open_bench(args.bench, args.data_dir, backend=args.backend)
    tasks = bench.tasks(args.split or bench.default_split, limit=args.limit)
    runs: dict[str, list[dict[str, Any]]] = {"sequential": [], "spork": []}
    # The local model, served by a child `agentspec serve --decoder toolspec` (or the --base-url one); the
    # environment's model endpoints do not apply.
    authority = RunSpec.of(bench=args.bench, agent="llm", solo=True, agent_model=args.model)
    async with open_roles(authority, server=args.base_url, env={}) as roles:
        client = roles.clients["agent"]
        base_url = client.config.base_url
        before = await server_stats(base_url)
        for index, task in enumerate(tasks):
            # A warm-up episode leaves every turn's prompt in the prefix cache, so that the measured
            # runs (whichever goes first) prefill nothing but what they themselves add.
            warm = await episode(bench, task, client, args, False)
            print(f"{task.id} warm-up: {warm['wall_s']:.1f} s", file=sys.stderr, flush=True)
            order = [False, True] if index % 2 == 0 else [True, False]
            for spork in order:
                run = await episode(bench, task, client, args, spork)
                runs["spork" if spork else "sequential"].append(run)
                print(f"{task.id} {'spork' if spork else 'sequential'}: {run['wall_s']:.1f} s, "
                      f"{json.dumps({k: run['metrics'].get(k) for k in ('probes', 'probe_hits', 'probe_name_hits', 'commits_spork')})}",
                      file=sys.stderr, flush=True)
        after = await server_stats(base_url)
    seq, spk = summary(runs["sequential"]), summary(runs["spork"])
    probes = max(spk["probes"], 1)
    same = sum(a["calls"] == b["calls"] for a, b in zip(runs["sequential"], runs["spork"], strict=True))
    return {
        "model": args.model, "tasks": len(tasks), "tool_latency_s": args.tool_latency, "max_calls": args.max_calls,
        "gate": args.gate, "probe_every": args.probe_every, "cost_model": not args.no_cost_model,
        "sequential": seq, "spork": spk,
        "wall_ratio_sequential_over_spork": round(seq["mean_task_wall_s"] / spk["mean_task_wall_s"], 3),
        "probe_name_hit_rate": round(spk["probe_name_hits"] / probes, 3),
        "probe_call_hit_rate": round(spk["probe_hits"] / probes, 3),
        "probe_cached_share": round(spk["probe_cached_tokens"] / max(spk["probe_prompt_tokens"], 1), 3),
        "hints_forwarded": after.get("hints_forwarded", 0) - before.get("hints_forwarded", 0),
        "same_calls_both_modes": f"{same}/{len(tasks)}",
        "episodes": runs,
    }


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="tau2-telecom", help="tau2-telecom, or gaia (with --data-dir DIR)")
    parser.add_argument("--backend", help="the bench's environment backend (gaia: docker, overlay, copy or none)")
    parser.add_argument("--data-dir", default="../shared/data/tau2")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--base-url", help="a running `agentspec serve --decoder toolspec` (default: start one)")
    parser.add_argument("--split", help="default: tau2's base split, the bench's own otherwise")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--max-calls", type=int, default=3, help="authority decisions per episode")
    parser.add_argument("--max-tokens", type=int, default=192, help="per authority decision")
    parser.add_argument("--probe-tokens", type=int, default=40)
    parser.add_argument("--tool-latency", type=float, default=4.0, help="seconds every tool call takes")
    parser.add_argument("--answer-prefix", default="Thought:",
                        help="what each authority answer starts with (continued by the server), so it reasons first")
    parser.add_argument("--gate", type=float, default=0.9)
    parser.add_argument("--probe-every", type=int, default=8)
    parser.add_argument("--no-cost-model", action="store_true")
    args = parser.parse_args()
    if args.split is None and args.bench == "tau2-telecom":
        args.split = "base"
    return args


if __name__ == "__main__":
    report = anyio.run(main, parse())
    print(json.dumps(report))
