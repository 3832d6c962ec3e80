"""sequential / sa / smc on the tau2 base split with the oracle authority and the smc-paper latency model.

Runs `agentspec run --mode sequential,sa,smc` once per speculator accuracy P (noisy-oracle:P), all modes of one
P in the same process on the virtual clock, and prints one JSON object: per P and mode, reward, mean / P50 / P95
simulated task wall time, the ratio against sequential, commits and waste.

    python experiments/latency_table.py --data-dir ../shared/data/tau2 [--macros FILE.json]

smc uses the bench's shipped library (macros/tau2-telecom.json) unless --macros names another.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json

from agentspec.cli import main as cli

KEYS = ["reward_mean", "mean_task_wall_s", "p50_wall_s", "p95_wall_s", "authority_calls", "authority_skipped",
        "commits_sa", "commits_macro", "wasted_tool_calls", "wasted_tokens"]


def run(p: float, args: argparse.Namespace) -> dict:
    argv = ["run", "--json", "--bench", "tau2-telecom", "--split", args.split, "--solo", "--agent", "oracle", "--mode", "sequential,sa,smc",
            "--speculator-model", f"noisy-oracle:{p}", "--latency-model", "smc-paper", "--no-progress"]
    if args.data_dir:
        argv += ["--data-dir", args.data_dir]
    if args.macros:
        argv += ["--macros", args.macros]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if cli(argv) != 0:
            raise SystemExit(f"run failed for P={p}")
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    table = {mode: {key: s[key] for key in KEYS} for mode, s in summary["modes"].items()}
    for mode in table:
        table[mode]["ratio_vs_sequential"] = summary["speedup_vs_sequential"][mode]
    return {"clock": summary["clock"], "run_wall_s": summary["run_wall_s"], "modes": table}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default="base")
    parser.add_argument("--macros", default=None)
    parser.add_argument("--p", default="0.6,0.8,1.0")
    args = parser.parse_args()
    result = {"split": args.split, "latency_model": "smc-paper", "macros": args.macros,
              "by_p": {p: run(float(p), args) for p in args.p.split(",")}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
