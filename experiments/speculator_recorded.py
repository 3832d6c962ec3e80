"""The learned speculator on real agents' recorded runs, leave one recording out.

For every recording given (a tau2-bench simulation file of a real model), a speculator is fitted on the bench's
``--gold-split`` gold calls (less the tasks of that recording: a task's own gold calls may not be in the fit of
its scoring) and on every other recording given, then scored on each call of that recording's agent, with and
without look-ahead, exactly as ``agentspec speculator fit --runs`` / ``speculator score --runs`` fit and score
(:func:`agentspec.learned_speculator.command.fit_bench`, :func:`agentspec.learned_speculator.score.score_runs`: a normal-mode
recording's user calls run between the agent's so that the state is the recording's, and only the agent's calls
are scored, each guess among the agent's own tools).  Nothing is tuned to a recording: the same fit for all.

Prints progress to stderr and, as the last stdout line, one JSON object keyed by the recording's file name:
``steps``, ``episodes``, the fit's ``trajectories`` and ``fit_s``, and per mode (``without``, ``with``
look-ahead) ``exact_at_1``, ``exact_at_3``, ``name_at_1``, ``strict_at_1``, ``predict_us_median``::

    T=../shared/data/traces
    .venv/bin/python experiments/speculator_recorded.py --data-dir ../shared/data/tau2 \\
        $T/sierra_gpt-4.1_telecom_solo.json $T/sierra_gpt-4.1_telecom_default.json \\
        $T/blake_grok-3_telecom-workflow.json $T/linyxus_gemini-3.1-flash-lite_telecom-workflow.json

``--episodes N`` scores only the first N episodes of each recording (a quick check); ``--out F`` also writes the
JSON object to ``F``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from agentspec.bench.protocol import recording_at
from agentspec.bench.registry import open_bench
from agentspec.errors import ConfigError
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.score import score_runs, summarise
from agentspec.learned_speculator.trajectories import run_trajectories

FIGURES = ("exact_at_1", "exact_at_3", "name_at_1", "strict_at_1", "predict_us_median")


async def leave_one_out(bench: Any, files: list[str], held: str, gold_split: str, episodes: int | None) -> dict[str, Any]:
    """Fit on the gold split (less ``held``'s tasks) and the other ``files``; score on ``held``'s agent calls."""
    recording = recording_at(bench, held)
    if recording is None:
        raise ConfigError(f"{held}: not a recording {bench.name} reads")
    held_ids = set(recording.task_ids())
    gold = [task for task in bench.tasks(gold_split) if task.id not in held_ids]
    others = [f for f in files if f != held]
    started = time.perf_counter()
    artifact = await fit_bench(bench, gold, runs=others, split=gold_split)
    fit_s = time.perf_counter() - started
    artifact.fitted_on.check_unseen(sorted(held_ids), recording.digest)
    mined = run_trajectories([held], held_ids, bench=bench)[:episodes]
    tasks = [bench.task(task_id) for task_id in sorted({m.task_id for m in mined})]
    out: dict[str, Any] = {"episodes": len(mined), "trajectories": artifact.fitted_on.trajectories,
                           "fit_s": round(fit_s, 1)}
    for mode, lookahead in (("without", False), ("with", True)):
        figures = summarise(await score_runs(bench, tasks, mined, artifact.model, lookahead=lookahead))
        out["steps"] = figures["steps"]
        out[mode] = {name: figures[name] for name in FIGURES}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recordings", nargs="+", help="recorded runs (tau2 simulation files), two at least")
    parser.add_argument("--bench", default="tau2-telecom")
    parser.add_argument("--data-dir", help="the bench's data folder")
    parser.add_argument("--gold-split", default="train", help="the split whose gold calls are fitted on too")
    parser.add_argument("--episodes", type=int, help="score only the first N episodes of each recording")
    parser.add_argument("--out", help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if len(args.recordings) < 2:
        parser.error("leave one out needs two recordings at least")
    bench = open_bench(args.bench, args.data_dir)
    results: dict[str, Any] = {}
    for held in args.recordings:
        print(f"speculator_recorded: {Path(held).name}: fitting on the others...", file=sys.stderr, flush=True)
        results[Path(held).name] = anyio.run(leave_one_out, bench, args.recordings, held, args.gold_split,
                                             args.episodes)
        print(f"speculator_recorded: {Path(held).name}: {json.dumps(results[Path(held).name])}", file=sys.stderr,
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(results, sort_keys=True))
    return results


if __name__ == "__main__":
    main()
