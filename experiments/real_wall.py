"""Real models on the real clock: tau2-telecom solo episodes, every mode in one run, modes alternating task by task.

The authority is ``qwen2.5-coder-1.5b`` and the speculator ``qwen2.5-coder-0.5b``, both served by one
``agentspec serve --decoder toolspec`` child process (or ``--base-url`` for a server you run that has both).
Each task runs once per mode; the order of the modes rotates from task to task, so machine noise and a warm
prefix cache hit every mode alike.  Tools in tau2 answer in microseconds, where real agents call remote APIs, so
every live tool call also sleeps ``--tool-latency`` seconds (a real sleep, reported in the JSON).

    python experiments/real_wall.py --data-dir ../shared/data/tau2 --limit 10 --tool-latency 1.0

Reported per mode: mean, P50 and P95 task wall time and the ratio to sequential; reward; authority calls and
calls skipped; the speculator's next-call hit rate; probe hits; ToolSpec forwards per authority call; guesses handed
to a running authority request (``late_hints``); where the time went (authority, waiting for the guess, speculator,
tools); the share of
task time during which two model lanes (authority and speculator or probe) were busy at once; whether each
task's calls equal sequential's (sa must: greedy decoding and exact-match commits change timing only).  With
``--timelines DIR`` a PNG timeline of the first task per mode is written there.  The last stdout line is JSON
keyed by mode.  ``MODE/draft-first`` (``sa/draft-first``) runs the mode with the authority waiting for the
speculator's guess, which its decoder then verifies (``RunSpec.draft_first``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentspec.assembly import assemble, load_macros, mode_governor, run_episode  # noqa: E402
from agentspec.bench.registry import open_bench  # noqa: E402
from agentspec.models import ModelClient  # noqa: E402
from agentspec.roles import open_roles  # noqa: E402
from agentspec.run_spec import RunSpec  # noqa: E402
from agentspec.runtime.governor.rule import Governor  # noqa: E402
from agentspec.runtime.latency import LatencyModel, ToolLatency  # noqa: E402
from agentspec.runtime.summary import sum_panels  # noqa: E402
from agentspec.stats import percentile  # noqa: E402

MODEL_LANES = ("authority", "speculator", "probe")


def overlap_s(events: list[dict[str, Any]]) -> float:
    """Seconds during which at least two model lanes were busy (authority with a speculator or a probe)."""
    edges = sorted([(e["start"], 1) for e in events if e["lane"] in MODEL_LANES and e["end"] > e["start"]]
                   + [(e["end"], -1) for e in events if e["lane"] in MODEL_LANES and e["end"] > e["start"]])
    busy, last, total = 0, 0.0, 0.0
    for at, step in edges:
        if busy >= 2:
            total += at - last
        busy, last = busy + step, at
    return total


def calls_of(episode: Any) -> list[tuple[str, str]]:
    return [(c.name, json.dumps(c.arguments, sort_keys=True)) for m in episode.trajectory.messages for c in m.tool_calls]


async def play(spec: RunSpec, bench: Any, task: Any, clients: dict[str, ModelClient], macros: Any,
               governor: Governor | None = None) -> dict[str, Any]:
    """One episode of ``spec``'s mode, its speculators under ``governor`` (the mode's, shared by its tasks)."""
    mode = spec.modes[0]
    parts = assemble(spec, mode, bench, task, clients, solo=True, governor=governor)
    episode = await run_episode(spec, mode, bench, task, parts, macros=macros)
    record = episode.record()
    execution = record.get("execution") or {}
    events = execution.get("timeline") or []
    return {"task": task.id, "wall_s": episode.timings["wall_s"], "reward": record.get("reward"),
            "error": record.get("error"), "termination": str(episode.trajectory.termination),
            "metrics": execution.get("metrics") or {}, "calls": calls_of(episode),
            "overlap_s": overlap_s(events), "timeline": events}


def summarise(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    total = {key: sum(r["metrics"].get(key, 0) or 0 for r in runs) for key in (
        "authority_calls", "authority_skipped", "speculator_calls", "commits_sa", "commits_macro", "commits_spork",
        "probes", "probe_hits", "authority_forwards", "authority_reported_calls", "speculative_tool_calls",
        "wasted_tool_calls", "late_hints", "late_hints_delivered", "authority_hint_tokens", "lookahead_calls",
        "lookahead_batches")}
    predictions = sum((r["metrics"].get("predictions_by_depth") or [0])[0] for r in runs)
    hits = sum((r["metrics"].get("hits_by_depth") or [0])[0] for r in runs)
    mean = sum(walls) / len(walls)
    base = sum(r["wall_s"] for r in baseline) / len(baseline)
    return {
        "tasks": len(runs), "mean_task_wall_s": round(mean, 2), "p50_wall_s": round(percentile(walls, 0.5), 2),
        "p95_wall_s": round(percentile(walls, 0.95), 2), "ratio_vs_sequential": round(base / mean, 3),
        "reward_mean": round(sum(r["reward"] or 0 for r in runs) / len(runs), 4),
        "speculator_hit_rate": round(hits / predictions, 3) if predictions else None,
        "forwards_per_authority_call": (round(total["authority_forwards"] / total["authority_reported_calls"], 2)
                                        if total["authority_reported_calls"] else None),
        "overlap_fraction": round(sum(r["overlap_s"] for r in runs) / max(sum(walls), 1e-9), 3),
        "same_calls_as_sequential": sum(r["calls"] == b["calls"] for r, b in zip(runs, baseline, strict=True)),
        "mean_time_s": {key: round(sum(r["metrics"].get(key, 0) or 0 for r in runs) / len(runs), 2)
                        for key in ("authority_wait_s", "draft_wait_s", "speculator_busy_s", "tool_wait_s")},
        "errors": [r["error"] for r in runs if r["error"]],
        "speculators": sum_panels([r["metrics"].get("speculators") for r in runs]),
        **total,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes = args.modes.split(",")
    if modes[0] != "sequential":
        raise SystemExit("--modes must start with sequential (the baseline of every ratio)")
    bench = open_bench("tau2-telecom", args.data_dir)
    tasks = bench.tasks(args.split, limit=args.limit)
    specs = {mode: mode_spec(mode, args) for mode in modes}
    warm_mode = next((mode for mode in modes if specs[mode].modes[0].base in ("sa", "smc")), modes[0])
    smc = next((spec for spec in specs.values() if spec.modes[0].base == "smc"), None)
    _, macros = load_macros(smc) if smc is not None else (None, None)
    # Both models local, served by one child `agentspec serve --decoder toolspec` (or the --base-url one) for
    # every mode; the environment's model endpoints do not apply.
    both = RunSpec.of(bench="tau2-telecom", agent="llm", solo=True, modes="sa", agent_model=args.authority_model,
                      speculator_model=args.speculator_model, more_speculators=args.more_speculator)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    governors = {mode: mode_governor(spec, spec.modes[0]) for mode, spec in specs.items()}
    warmups: list[dict[str, Any]] = []
    started = time.perf_counter()
    async with open_roles(both, server=args.base_url, env={}) as roles:
        clients = roles.clients
        for index, task in enumerate(tasks):
            if args.warm:
                # Tasks share the policy, manual and tool schemas but not the ticket, which tau2 puts in the
                # system prompt before the ~4.7k tokens of schemas: a ticket the server has not seen costs a
                # prefill of minutes on CPU, landing on whichever mode plays it first.  One unmeasured
                # episode per task (in a speculating mode, so both models prefill) makes the modes start even.
                run = await play(specs[warm_mode], bench, task, clients, macros)
                warmups.append({"task": task.id, "mode": warm_mode, "wall_s": round(run["wall_s"], 1)})
                print(f"{task.id} warm-up ({warm_mode}): {run['wall_s']:.1f} s", file=sys.stderr, flush=True)
            order = modes[index % len(modes):] + modes[:index % len(modes)]
            for mode in order:
                run = await play(specs[mode], bench, task, clients, macros, governors[mode])
                runs[mode].append(run)
                print(f"{task.id} {mode}: {run['wall_s']:.1f} s, reward {run['reward']}", file=sys.stderr, flush=True)
    if args.timelines:
        from agentspec.report.timeline import plot_timeline

        for mode, mode_runs in runs.items():
            plot_timeline(mode_runs[0]["timeline"], Path(args.timelines) / f"real-wall-{mode.replace('/', '-')}.png",
                          title=f"{mode}: {mode_runs[0]['task']}")
    report = {mode: summarise(mode_runs, runs["sequential"]) for mode, mode_runs in runs.items()}
    for mode, governor in governors.items():
        if governor is not None:
            report[mode]["governor"] = governor.report()
    conditions = {"authority": args.authority_model, "speculator": args.speculator_model,
                  "more_speculators": args.more_speculator, "governor": args.governor, "split": args.split,
                  "tool_latency_s": args.tool_latency, "max_calls": args.max_calls, "hints": args.hints,
                  "warm": args.warm, "warmup_episodes": warmups,
                  "run_s": round(time.perf_counter() - started, 1)}
    print(json.dumps({"conditions": conditions, "episodes": {m: [{k: v for k, v in r.items() if k != "timeline"}
                                                                 for r in rs] for m, rs in runs.items()}}),
          file=sys.stderr)
    return {**report, "conditions": conditions}


VARIANTS = {"draft-first": {"draft_first": True}}
"""``MODE/VARIANT`` in ``--modes``: the mode with other executor settings (``sa/draft-first``)."""


def mode_spec(mode: str, args: argparse.Namespace) -> RunSpec:
    """The spec of one ``--modes`` entry: a mode (``sa``), or a mode and a variant (``sa/draft-first``)."""
    base, _, variant = mode.partition("/")
    if variant and variant not in VARIANTS:
        raise SystemExit(f"--modes {mode}: unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    return RunSpec.of(
        bench="tau2-telecom", agent="llm", solo=True, modes=base, agent_model=args.authority_model,
        speculator_model=args.speculator_model, more_speculators=args.more_speculator, max_tokens=args.max_tokens,
        max_calls=args.max_calls, governor=args.governor,
        speculator_hints=args.hints, depth=args.depth,
        latency_model=LatencyModel(name="tool-latency", tool=ToolLatency(fixed_s=args.tool_latency)),
        **VARIANTS.get(variant, {}),
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/tau2")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--modes", default="sequential,sa,sa/draft-first,smc,smc/draft-first,spork",
                        help="comma list, sequential first; MODE/draft-first: the authority waits for the guess")
    parser.add_argument("--authority-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--speculator-model", default="qwen2.5-coder-0.5b",
                        help="a model name, or learned:FILE (a file of `agentspec speculator fit`)")
    parser.add_argument("--governor", action=argparse.BooleanOptionalAction, default=True,
                        help="each speculating mode under a governor that pauses a speculator costing more than it saves")
    parser.add_argument("--more-speculator", action="append", default=[], metavar="M",
                        help="a further speculator, asked where the ones before abstain, under the same governor")
    parser.add_argument("--base-url", help="a running `agentspec serve --decoder toolspec` with both models")
    parser.add_argument("--tool-latency", type=float, default=1.0, help="seconds every live tool call sleeps")
    parser.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                        help="play each task once, unmeasured, before its measured episodes (warm prefix caches)")
    parser.add_argument("--max-calls", type=int, default=8, help="authority decisions per episode")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2, help="speculation chain depth")
    parser.add_argument("--hints", action=argparse.BooleanOptionalAction, default=True,
                        help="send the speculator's predicted calls to the authority's decoder as draft hints")
    parser.add_argument("--timelines", help="folder for one timeline PNG per mode (first task)")
    return parser.parse_args()


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, parse())))
