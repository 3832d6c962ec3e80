"""The mined tau2 macro library at work: sequential / sa / smc on the test split.

Oracle authority, noisy-oracle:0.8 speculator, smc-paper latency model on the
virtual clock, the library ``macros/tau2-telecom.json`` (mined from the train
split by ``agentspec mine``; ``--remine`` mines it afresh into a temporary
file first).  One run of ``agentspec run --mode sequential,sa,smc`` per seed;
prints one JSON object: the library's funnel, and per seed and mode the
reward, mean simulated task wall time, its ratio against sequential,
authority calls, commits and waste.  ``--verify`` also asks the authority,
off the critical path, whether it agreed with each macro commit
(``macro_disagreements`` counts the commits it would not have made; n and k
are then updated online, so later firings can differ).

    python experiments/smc_table.py --data-dir ../shared/data/tau2 [--seeds 0,1,2,3,4,5] [--verify] [--remine]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from agentspec.cli import main as cli
from agentspec.macros import MacroLibrary

REPO = Path(__file__).resolve().parents[1]
KEYS = ["tasks", "reward_mean", "mean_task_wall_s", "authority_calls", "authority_skipped", "commits_sa", "commits_macro",
        "macro_firings", "wasted_tool_calls"]


def _cli(argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if cli(argv) != 0:
            raise SystemExit(f"agentspec {argv[0]} failed")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _data(args: argparse.Namespace) -> list[str]:
    return ["--data-dir", args.data_dir] if args.data_dir else []


def run(seed: int, library: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = ["run", "--json", "--bench", "tau2-telecom", "--split", args.split, "--solo", "--agent", "oracle", "--mode", "sequential,sa,smc",
            "--speculator-model", f"noisy-oracle:{args.p}", "--latency-model", "smc-paper", "--macros", library,
            "--seed", str(seed), "--macro-commit", args.macro_commit, "--no-progress", *_data(args)]
    if args.verify:
        argv.append("--verify-macros")
    summary = _cli(argv)
    table = {mode: {key: s.get(key) for key in KEYS} for mode, s in summary["modes"].items()}
    for mode, row in table.items():
        row["ratio_vs_sequential"] = summary["speedup_vs_sequential"][mode]
    if args.verify:
        table["smc"]["macro_disagreements"] = summary["modes"]["smc"].get("macro_disagreements")
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default="test")
    parser.add_argument("--p", default="0.8", help="noisy-oracle accuracy of the speculator")
    parser.add_argument("--macros", default=str(REPO / "macros" / "tau2-telecom.json"))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--macro-commit", choices=["trusted", "verified"], default="trusted",
                        help="trusted: the SMC paper's commit, which the table reports; verified: the authority checks "
                             "each chain first (experiments/verified_smc.md)")
    parser.add_argument("--remine", action="store_true", help="mine the train split into a temporary library first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        library = args.macros
        if args.remine:
            library = str(Path(tmp) / "tau2-telecom.json")
            _cli(["mine", "--bench", "tau2-telecom", "--split", "train", "--speculator-model", f"noisy-oracle:{args.p}",
                  "--out", library, "--no-progress", *_data(args)])
        loaded = MacroLibrary.load(library)
        by_seed = {seed: run(int(seed), library, args) for seed in args.seeds.split(",")}
    print(json.dumps({
        "split": args.split, "speculator": f"noisy-oracle:{args.p}", "latency_model": "smc-paper",
        "library": {"path": args.macros if not args.remine else "(re-mined)", "macros": len(loaded.macros),
                    "funnel": loaded.provenance.get("funnel")},
        "by_seed": by_seed,
    }))


if __name__ == "__main__":
    main()
