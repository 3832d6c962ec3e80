"""What speculation would have saved real agents: recorded tau2-bench runs replayed as authorities (issue 36).

    .venv/bin/python experiments/recorded_authorities.py ../shared/data/traces/*.json --data-dir ../shared/data/tau2 \\
        --work runs/recorded --table experiments/recorded_authorities_table.md

For each recording given (the others are its "other models"), with agentspec's own commands:

1. ``agentspec score --runs REC``: every simulation replayed through agentspec's environment and evaluator, our
   reward beside the recorded one;
2. leave one recording out: ``agentspec speculator fit`` on the train split's gold calls (less this recording's
   tasks: ``--hold-out``) and every *other* recording, ``agentspec mine`` a macro library from the same (labelled as the shipped library is, with a
   speculator right 80% of the time: a verified commit checks every chain against the authority anyway), then ``agentspec speculator score --runs REC``
   against this recording's own calls, with and without look-ahead;
3. ``agentspec run --agent replay --runs REC --mode sequential,sa,smc --latency-model recorded`` at
   ``--tool-latency`` 0 s and 1.0 s, with that learned speculator guessing from history alone (fitted again with
   ``--lookahead-cap 0``) and that library, the same with its top 3 guesses run at every chain position
   (``--spec-width 3``: more calls in forks, more of them kept), and with the ceiling: a speculator that always
   names the recording's next call (``noisy-oracle:1.0``), the same library.

Prints one JSON object (per recording, every figure); ``--table FILE`` also writes the markdown table.  Nothing is
tuned to a recording: every one goes through the same commands, the held-out ones too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOOL_LATENCIES = (0.0, 1.0)
MODES = ("sequential", "sa", "smc")


def agentspec(*args: str) -> dict[str, Any]:
    """One agentspec command; its last stdout line (JSON)."""
    done = subprocess.run([sys.executable, "-m", "agentspec.cli", *args], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"agentspec {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(recording: str, others: list[str], data_dir: str, work: Path, *, task_ids: list[str] | None = None,
            split: str = "base") -> dict[str, Any]:
    """Every figure of one recording (see the module docstring)."""
    name = Path(recording).stem
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    data = ["--data-dir", data_dir]
    ids = ["--task-ids", ",".join(task_ids)] if task_ids else []
    rescored = agentspec("score", "--bench", "tau2-telecom", "--runs", recording, *data)
    if task_ids:
        rescored["episodes"] = [e for e in rescored["episodes"] if e["task_id"] in task_ids]
    speculator, running, macros = folder / "speculator.json", folder / "speculator-run.json", folder / "macros.json"
    started = time.perf_counter()
    fitting = ["speculator", "fit", "--bench", "tau2-telecom", "--split", "train", "--hold-out", recording,
               "--runs", *others, *data]
    fit = agentspec(*fitting, "--out", str(speculator))
    # The runs' speculator guesses from history alone (--lookahead-cap 0): real agents check before they fix
    # whatever the state shows, so look-ahead adds nothing to their exact@1 (both are scored below), and on the
    # recorded clock it would delay each guess by a tool time, past the fast decisions of an agent with a user.
    agentspec(*fitting, "--lookahead-cap", "0", "--out", str(running))
    mined = agentspec("mine", "--bench", "tau2-telecom", "--split", "train", "--runs", *others,
                      "--speculator-model", "noisy-oracle:0.8", *data, "--out", str(macros))
    prepared_s = time.perf_counter() - started
    scores = {}
    for lookahead in (False, True):
        scored = agentspec("speculator", "score", "--bench", "tau2-telecom", "--split", split, "--runs", recording,
                           "--speculator", str(speculator), *data, *(["--lookahead"] if lookahead else []))
        scores["lookahead" if lookahead else "history"] = {k: scored[k] for k in
                                                          ("steps", "exact_at_1", "exact_at_3", "name_at_1", "strict_at_1")}
    runs: dict[str, Any] = {}
    for label, model, width in (("learned", f"learned:{running}", 1), ("learned-top3", f"learned:{running}", 3),
                                ("ceiling", "noisy-oracle:1.0", 1)):
        for tools in TOOL_LATENCIES:
            summary = agentspec("run", "--json", "--bench", "tau2-telecom", "--agent", "replay", "--runs", recording, *ids,
                                "--mode", ",".join(MODES), "--speculator-model", model, "--spec-width", str(width),
                                "--macros", str(macros),
                                "--latency-model", "recorded", "--tool-latency", str(tools), *data,
                                "--out", str(folder / f"run-{label}-{tools:g}s"), "--overwrite", "--no-progress")
            runs[f"{label}@{tools:g}s"] = {
                "speedup": summary["speedup_vs_sequential"],
                "mean_task_s": {m: s["mean_task_wall_s"] for m, s in summary["modes"].items()},
                "reward": {m: s["reward_mean"] for m, s in summary["modes"].items()},
                "commits_sa": summary["modes"]["sa"].get("commits_sa"),
                "speculative_tool_calls": {m: summary["modes"][m].get("speculative_tool_calls", 0)
                                           + summary["modes"][m].get("alternative_tool_calls", 0) for m in ("sa", "smc")},
                "wasted_tool_calls": {m: summary["modes"][m].get("wasted_tool_calls") for m in ("sa", "smc")},
                "commits_macro": summary["modes"]["smc"].get("commits_macro"),
                "chain_steps_rejected": summary["modes"]["smc"].get("chain_steps_rejected"),
                "observation_mismatches": summary["modes"]["sequential"].get("observation_mismatches"),
                "governor": {m: (s.get("governor") or {}).get("paused") for m, s in summary["modes"].items()},
            }
    episodes = rescored["episodes"]
    agent_calls = [e for e in json.loads((folder / "run-learned-0s" / "results.json").read_text())["episodes"]["sequential"]]
    return {
        "recording": recording, "agent_model": rescored["agent_model"], "user_model": rescored["user_model"],
        "play": rescored["play"], "policy": rescored["policy"], "simulations": len(episodes),
        "recorded_reward_mean": _mean([e["recorded_reward"] or 0.0 for e in episodes]),
        "reward_mean": _mean([e["reward"] for e in episodes]),
        "rewards_equal": sum(e["reward"] == e["recorded_reward"] for e in episodes),
        "agent_calls_per_task": _mean([_agent_calls(r) for r in agent_calls]),
        "fit": {k: fit[k] for k in ("trajectories", "calls", "rules")}, "macros": mined["funnel"]["kept"],
        "prepared_s": round(prepared_s, 1), "exact": scores, "runs": runs,
    }


def _agent_calls(record: dict[str, Any]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in record["messages"] if m["role"] == "assistant")


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``experiments/recorded_authorities.md``."""
    head = ("| recording (agent, play) | tasks | reward recorded / re-evaluated | agent calls per task | exact@1 "
            "(look-ahead) | exact@3 (look-ahead) | sequential s/task, 0 s / 1 s tools | sa, smc at 0 s tools | "
            "sa, smc at 1 s tools | top 3 run: sa, smc at 0 s / 1 s | ceiling: sa, smc at 0 s / 1 s |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        h, la = r["exact"]["history"], r["exact"]["lookahead"]
        learned0, learned1 = r["runs"]["learned@0s"], r["runs"]["learned@1s"]
        ceiling0, ceiling1 = r["runs"]["ceiling@0s"], r["runs"]["ceiling@1s"]
        top0, top1 = r["runs"]["learned-top3@0s"], r["runs"]["learned-top3@1s"]

        def pair(run: dict[str, Any]) -> str:
            equal = len(set(run["reward"].values())) == 1
            return f"{run['speedup']['sa']:.2f}x, {run['speedup']['smc']:.2f}x" + ("" if equal else " (rewards differ!)")

        lines.append(
            f"| {Path(r['recording']).name} ({r['agent_model']}, {r['play']}) | {r['simulations']} | "
            f"{r['recorded_reward_mean']:.3f} / {r['reward_mean']:.3f} ({r['rewards_equal']} equal) | "
            f"{r['agent_calls_per_task']:.1f} | {h['exact_at_1']:.3f} ({la['exact_at_1']:.3f}) | "
            f"{h['exact_at_3']:.3f} ({la['exact_at_3']:.3f}) | {learned0['mean_task_s']['sequential']:.1f} / "
            f"{learned1['mean_task_s']['sequential']:.1f} | {pair(learned0)} | {pair(learned1)} | "
            f"{pair(top0)} / {pair(top1)} | {pair(ceiling0)} / {pair(ceiling1)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="+", help="tau2-bench simulation files (each is left out in turn)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--work", default="runs/recorded", help="where the fitted files and runs go")
    parser.add_argument("--table", help="also write the markdown table here")
    args = parser.parse_args()
    if len(args.recordings) < 2:
        raise SystemExit("give at least two recordings: each is measured with a speculator fitted on the others")
    work = Path(args.work)
    rows = []
    for recording in args.recordings:
        others = [r for r in args.recordings if r != recording]
        split = "test" if _all_in(recording, "test", args.data_dir) else "base"
        rows.append(measure(recording, others, args.data_dir, work, split=split))
    if args.table:
        Path(args.table).write_text(table(rows), encoding="utf-8")
    print(json.dumps({"recordings": rows}))


def _all_in(recording: str, split: str, data_dir: str) -> bool:
    """Whether every task of ``recording`` is in ``split`` of the data."""
    tasks = {s["task_id"] for s in json.loads(Path(recording).read_text(encoding="utf-8"))["simulations"]}
    splits = json.loads((Path(data_dir) / "telecom" / "split_tasks.json").read_text(encoding="utf-8"))
    return tasks <= set(splits.get(split, []))


if __name__ == "__main__":
    main()
