"""``agentspec score --runs FILE``: a recorded run of a real agent re-scored by agentspec (the parser is
:mod:`agentspec.cli.score`).

Each recorded episode is played through the executor as any run is (``--agent replay``, sequential, no latency):
the agent's and the user's calls in their order, on agentspec's environment, then scored by agentspec's evaluator.
Per simulation: our reward beside the recording's, the termination, the calls whose answer differs from the
recording's (``observation_mismatches``) and the checks whose outcome differs (``checks_differing``); overall, how
many rewards are equal.
"""

from __future__ import annotations

from typing import Any

from agentspec.assembly import recorded_run
from agentspec.bench.registry import open_bench
from agentspec.pipeline import run
from agentspec.run_spec import RunSpec
from agentspec.runtime.recording import differing_checks


def rescore_recordings(bench_name: str, paths: list[str], data_dir: str | None) -> dict[str, Any]:
    """Each recording at ``paths`` re-scored (:func:`rescore`): one file's figures, or ``recordings``: file -> its
    figures."""
    bench = open_bench(bench_name, data_dir)
    scored = {path: rescore(bench, path, data_dir) for path in paths}
    if len(scored) == 1:
        return {"bench": bench_name, **next(iter(scored.values()))}
    return {"bench": bench_name, "recordings": scored}


def rescore(bench: Any, path: str, data_dir: str | None) -> dict[str, Any]:
    """One recording's episodes replayed and scored by agentspec, beside the recording's own scores."""
    spec = RunSpec.of(bench=bench.name, data_dir=data_dir, agent="replay", runs=path, modes="sequential",
                      progress=False)
    recording = recorded_run(spec, bench)
    outcome = run(spec, bench)
    rows = []
    for episode in outcome.modes["sequential"].episodes:
        record = episode.record()
        recorded = recording.episode(record["task_id"], record.get("trial", 0))
        metrics = (record.get("execution") or {}).get("metrics") or {}
        rows.append({
            "simulation": recorded.source, "task_id": recorded.task_id, "trial": recorded.trial,
            "recorded_reward": recorded.reward, "reward": record["reward"],
            "recorded_termination": recorded.termination.value if recorded.termination else None,
            "termination": record.get("termination"), "error": record.get("error"),
            "observation_mismatches": metrics.get("observation_mismatches", 0),
            "checks_differing": differing_checks(recorded, record.get("evaluation")),
        })
    equal = sum(1 for row in rows if row["recorded_reward"] is not None and row["reward"] == row["recorded_reward"])

    def mean(key: str) -> float | None:
        return round(sum(r[key] or 0.0 for r in rows) / len(rows), 4) if rows else None

    return {
        "runs": path, "agent_model": recording.agent_model, "user_model": recording.user_model,
        "play": "solo" if recording.solo else "normal", "policy": recording.policy,
        "simulations": len(rows), "rewards_equal": equal, "rewards_equal_share": round(equal / len(rows), 4) if rows else None,
        "recorded_reward_mean": mean("recorded_reward"), "reward_mean": mean("reward"),
        "observation_mismatches": sum(r["observation_mismatches"] for r in rows),
        "checks_differing": sum(len(r["checks_differing"]) for r in rows),
        "differing": [r for r in rows if r["reward"] != r["recorded_reward"] or r["checks_differing"]],
        "episodes": rows,
    }
