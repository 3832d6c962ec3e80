"""Real speculators on tau2 telecom (solo): record their decisions once, replay them on the virtual clock.

For each pair AUTHORITY:SPECULATOR (``oracle`` = the gold calls) this runs

1. ``agentspec run --mode sequential,sa --record DIR``: the real models decide (wall clock, this machine); a
   recording run lets the speculator fill its chain before each authority decision, so the recording holds every
   question a replay can ask;
2. ``agentspec run --mode sequential,sa,smc --replay DIR --latency-model smc-paper``: the same decisions, timed by
   the smc-paper latency model (GPU-scale speeds, output tokens as recorded) on the virtual clock;

and reports the speculator's next-call hit rate (exact call and tool name, by chain depth 1..4) and each mode's
simulated task time and reward.  ``--sweep`` also runs ``noisy-oracle:P`` for each P (virtual clock, no model) and
draws mode speed-up against next-call hit rate, with each real pair placed on the curve (``--plot FILE.png``).

    python experiments/real_speculator.py --data-dir ../shared/data/tau2 --limit 4 \\
        --pairs oracle:qwen2.5-coder-0.5b,oracle:smollm2-135m --sweep 0.2,0.4,0.6,0.8,1.0 --plot runs/hit-rate.png

smc uses the library given with ``--macros`` (default: the shipped one, labelled with noisy-oracle:0.8 on the
train split; mine one per speculator with ``agentspec mine --speculator-model NAME`` to label it by that model).
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentspec.cli import main as cli  # noqa: E402

KEYS = ["reward_mean", "mean_task_wall_s", "p95_wall_s", "authority_calls", "authority_skipped", "commits_sa",
        "commits_macro", "speculator_hit_rate", "speculator_name_hit_rate", "speculator_hit_rate_by_depth",
        "speculator_name_hit_rate_by_depth"]


def agentspec_run(argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["run", "--json", "--bench", "tau2-telecom", "--solo", "--no-progress", *argv])
    if code != 0:
        raise SystemExit(f"agentspec run {' '.join(argv)} failed ({code})")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    modes = {mode: {k: s.get(k) for k in KEYS} for mode, s in summary["modes"].items()}
    for mode in modes:
        modes[mode]["ratio_vs_sequential"] = (summary["speedup_vs_sequential"] or {}).get(mode)
    return modes


def pair(authority: str, speculator: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.out) / f"{authority}--{speculator}"
    agent = ["--agent", "oracle"] if authority == "oracle" else ["--agent-model", authority]
    common = [*args.tasks, *agent, "--speculator-model", speculator, "--data-dir", args.data_dir]
    if args.macros:
        common += ["--macros", args.macros]
    started = time.perf_counter()
    if args.force or not (folder / "rec" / "responses.jsonl").is_file():
        recorded = agentspec_run([*common, "--mode", "sequential,sa", "--record", str(folder / "rec")])
        failed = {mode: s["first_error"] for mode, s in recorded["modes"].items() if s.get("failed_episodes")}
        if failed:  # e.g. a prompt longer than the speculator's context: say so, measure the others
            print(f"{authority}:{speculator}: episodes failed: {failed}", file=sys.stderr, flush=True)
            return {"authority": authority, "speculator": speculator, "error": failed}
    recorded_s = time.perf_counter() - started
    replayed = agentspec_run([*common, "--mode", "sequential,sa,smc", "--replay", str(folder / "rec"),
                              "--latency-model", "smc-paper", "--out", str(folder / "replay")])
    print(f"{authority}:{speculator}: recorded in {recorded_s:.0f} s", file=sys.stderr, flush=True)
    return {"authority": authority, "speculator": speculator, "record_s": round(recorded_s, 1),
            "modes": figures(replayed)}


def sweep(p: float, args: argparse.Namespace) -> dict[str, Any]:
    argv = [*args.tasks, "--agent", "oracle", "--speculator-model", f"noisy-oracle:{p}", "--mode", "sequential,sa,smc",
            "--latency-model", "smc-paper", "--data-dir", args.data_dir]
    if args.macros:
        argv += ["--macros", args.macros]
    return {"p": p, "modes": figures(agentspec_run(argv))}


def plot(curve: list[dict[str, Any]], pairs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, colour in (("sa", "#c44e52"), ("smc", "#8172b3")):
        points = [(c["modes"]["sa"]["speculator_hit_rate"], c["modes"][mode]["ratio_vs_sequential"]) for c in curve]
        points = sorted((x, y) for x, y in points if x is not None and y is not None)
        ax.plot([x for x, _ in points], [y for _, y in points], "-o", color=colour, label=f"{mode}, noisy-oracle:P")
        for p in pairs:
            if "modes" not in p:
                continue
            x, y = p["modes"]["sa"]["speculator_hit_rate"], p["modes"][mode]["ratio_vs_sequential"]
            if x is not None and y is not None:
                ax.plot([x], [y], "*", markersize=14, color=colour)
                if mode == "smc":  # one label per pair (sa's star sits on the same hit rate)
                    ax.annotate(p["speculator"], (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_xlabel("speculator next-call hit rate (exact call)")
    ax.set_ylabel("task time: sequential / mode (smc-paper latency)")
    ax.set_title("Speed-up against speculator accuracy, tau2 telecom (solo)", loc="left", fontsize=10)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/tau2")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--pairs", default="oracle:qwen2.5-coder-0.5b", help="AUTHORITY:SPECULATOR,... (oracle = gold)")
    parser.add_argument("--sweep", default="", help="noisy-oracle P values, e.g. 0.2,0.4,0.6,0.8,1.0")
    parser.add_argument("--macros", default=None)
    parser.add_argument("--out", default="runs/real-speculator")
    parser.add_argument("--plot", default=None, help="PNG of speed-up against hit rate")
    parser.add_argument("--force", action="store_true", help="record again even where a recording exists")
    args = parser.parse_args()
    args.tasks = ["--split", args.split, *(["--limit", str(args.limit)] if args.limit else [])]
    pairs = [pair(*spec.split(":", 1), args) for spec in args.pairs.split(",") if spec]
    curve = [sweep(float(p), args) for p in args.sweep.split(",") if p]
    if args.plot and curve:
        plot(curve, pairs, Path(args.plot))
    print(json.dumps({"split": args.split, "limit": args.limit, "latency_model": "smc-paper", "macros": args.macros,
                      "pairs": pairs, "sweep": curve, "plot": args.plot}))


if __name__ == "__main__":
    main()
