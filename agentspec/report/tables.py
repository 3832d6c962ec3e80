"""The report's figures as plain data: every number the page shows is computed here, never in the template.

Each function takes the runs read by :mod:`agentspec.report.load` and returns rows (dicts) the template lays
out.  Speculator hits by chain depth: the hit rate is measured by the executor (of the drafts standing at
depth d when the authority decided, the share equal to the call committed d-1 steps later:
``speculator_hit_rate_by_depth``); commits are counted by depth too: depth 1 is the first draft the authority
confirmed (SA), depth d > 1 a draft a macro committed after its anchor (the executor shifts the chain on each
commit, so a macro's k-th step was the (k+1)-th draft).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agentspec.report.load import ModeRun, Run, episode_key
from agentspec.results import task_time
from agentspec.stats import percentile

COMMIT_KINDS = [("sa", "commits_sa"), ("macro", "commits_macro"), ("spork", "commits_spork"), ("reuse", "reused_read_only")]


def _ratio(base: float | None, value: float | None) -> float | None:
    return round(base / value, 4) if base and value else None


def sequential_wall(runs: list[Run], run: Run) -> tuple[float | None, str | None]:
    """The mean task time modes are compared with: this run's sequential, else the first run's that has one
    over the same tasks on the same clock (a virtual-clock time and a wall time are not comparable)."""
    same = ("clock", "split", "tasks", "trials", "latency_model")
    for candidate in [run, *runs]:
        if any(candidate.summary.get(key) != run.summary.get(key) for key in same):
            continue
        mode = candidate.modes.get("sequential")
        if mode is not None and mode.summary.get("mean_task_wall_s"):
            return float(mode.summary["mean_task_wall_s"]), candidate.name
    return None, None


def summary_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per run and mode: reward, pass^k, task time, ratio vs sequential, calls, commits, waste."""
    rows = []
    for run in runs:
        base, base_run = sequential_wall(runs, run)
        for mode, data in run.modes.items():
            s = data.summary
            rows.append({
                "run": run.name, "mode": mode, "episodes": s.get("episodes", len(data.episodes)),
                "reward_mean": s.get("reward_mean"), "pass_hat_k": s.get("pass_hat_k") or {},
                "mean_task_wall_s": s.get("mean_task_wall_s"), "p50_wall_s": s.get("p50_wall_s"),
                "p95_wall_s": s.get("p95_wall_s"),
                "speedup_vs_sequential": _ratio(base, s.get("mean_task_wall_s")),
                "baseline_run": base_run if base_run != run.name else None,
                "authority_calls": s.get("authority_calls"), "authority_skipped": s.get("authority_skipped"),
                **{key: s.get(key) for _, key in COMMIT_KINDS},
                "live_executions": s.get("live_executions"),
                "wasted_tool_calls": s.get("wasted_tool_calls"), "wasted_tokens": s.get("wasted_tokens"),
            })
    return rows


def task_times(data: ModeRun) -> list[float]:
    return [task_time(e) for e in data.episodes]


def speedups_per_task(runs: list[Run]) -> dict[str, list[float]]:
    """Per (run, mode): each episode's sequential task time over its own, paired by task and trial."""
    out: dict[str, list[float]] = {}
    for run in runs:
        sequential = run.modes.get("sequential")
        if sequential is None:
            continue
        base = {episode_key(e): task_time(e) for e in sequential.episodes}
        for mode, data in run.modes.items():
            if mode == "sequential":
                continue
            ratios = [base[episode_key(e)] / task_time(e) for e in data.episodes
                      if base.get(episode_key(e)) and task_time(e) > 0]
            if ratios:
                out[mode if len(runs) == 1 else f"{run.name}: {mode}"] = ratios
    return out


def _timeline(record: dict[str, Any]) -> list[dict[str, Any]]:
    return list((record.get("execution") or {}).get("timeline") or [])


def depth_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Per (run, mode) with a speculator: authority decisions, drafts committed at each chain depth, depth-1 hit rate."""
    rows = []
    for run in runs:
        for mode, data in run.modes.items():
            if not data.summary.get("speculator_calls"):
                continue
            decisions = 0
            by_depth: Counter[int] = Counter()
            for record in data.episodes:
                for event in _timeline(record):
                    if event.get("lane") == "authority" and event.get("label") != "done":
                        decisions += 1
                    elif event.get("lane") == "commit" and event.get("kind") == "sa":
                        by_depth[1] += 1
                    elif event.get("lane") == "commit" and event.get("kind") == "macro":
                        for depth in range(2, 2 + len(str(event.get("label", "")).split("+"))):
                            by_depth[depth] += 1
            rates = data.summary.get("speculator_hit_rate_by_depth") or []
            rows.append({"run": run.name, "mode": mode, "speculator_calls": data.summary.get("speculator_calls"),
                         "decisions": decisions, "by_depth": dict(sorted(by_depth.items())),
                         "hit_rate_by_depth": {d: rate for d, rate in enumerate(rates, 1)},
                         "hit_rate_depth1": round(by_depth[1] / decisions, 4) if decisions else None,
                         "drafts_discarded": data.summary.get("drafts_discarded")})
    return rows


def _library(path: Any) -> dict[str, dict[str, Any]]:
    """Macros by id from a library file; empty when the file is gone (the report still shows the firings)."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {m["id"]: m for m in data.get("macros", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _macro_text(macro: dict[str, Any]) -> str:
    return " → ".join(step.get("name", "?") for step in macro.get("steps", []))


def macro_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Each macro that fired: where, how often, and its reliability (n, k, lcb) before and after the run."""
    rows = []
    for run in runs:
        before = _library(run.summary.get("macros"))
        after = _library(run.summary.get("macros_out"))
        for mode, data in run.modes.items():
            fired = Counter(m for e in data.episodes for m in (e.get("execution") or {}).get("macros_fired") or [])
            for macro_id, count in fired.most_common():
                old, new = before.get(macro_id, {}), after.get(macro_id)
                rows.append({"run": run.name, "mode": mode, "id": macro_id, "fired": count,
                             "steps": _macro_text(old) if old else "", "before": {k: old.get(k) for k in ("n", "k", "lcb")},
                             "after": {k: new.get(k) for k in ("n", "k", "lcb")} if new else None})
    return rows


PROBE_KEYS = ["probes", "probe_hits", "probe_name_hits", "gated_out", "invalid_probes", "early_dispatches", "commits_spork"]


def probe_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """SPORK: probes, hits and gate outcomes per (run, mode) that probed."""
    return [{"run": run.name, "mode": mode, **{k: data.summary.get(k, 0) for k in PROBE_KEYS}}
            for run in runs for mode, data in run.modes.items() if data.summary.get("probes")]


def _find(value: Any, key: str) -> list[dict[str, Any]]:
    """Every dict stored under ``key`` anywhere inside ``value``."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k == key and isinstance(v, dict):
                    found.append(v)
                else:
                    stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def token_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Token level (``agentspec serve --decoder toolspec``): forwards per call and accepted tokens by draft source."""
    rows = []
    for run in runs:
        for mode, data in run.modes.items():
            reports = _find(data.episodes, "agentspec_decoding")
            if not reports:
                continue
            forwards = [r.get("target_forwards", 0) for r in reports]
            tokens = sum(r.get("tokens", 0) for r in reports)
            accepted: Counter[str] = Counter()
            for r in reports:
                accepted.update(r.get("accepted_by_source") or {})
            rows.append({"run": run.name, "mode": mode, "calls": len(reports),
                         "forwards_per_call": round(sum(forwards) / len(reports), 2),
                         "p95_forwards": round(percentile(forwards, 0.95), 2),
                         "tokens_per_forward": round(tokens / sum(forwards), 3) if sum(forwards) else None,
                         "accepted_by_source": dict(accepted.most_common())})
    return rows


def _call_text(call: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (call.get("arguments") or {}).items())
    return f"{call.get('name', '?')}({args})"


def trajectory(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The committed steps of an episode: index, source, call text, observation (from the messages and sources)."""
    sources = list((record.get("execution") or {}).get("sources") or [])
    results = {m.get("tool_call_id"): m for m in record.get("messages") or [] if m.get("role") == "tool"}
    steps: list[dict[str, Any]] = []
    for message in record.get("messages") or []:
        for call in message.get("tool_calls") or []:
            result = results.get(call.get("id"), {})
            steps.append({"index": len(steps), "source": sources[len(steps)] if len(steps) < len(sources) else "",
                          "call": _call_text(call), "observation": str(result.get("content", "")),
                          "error": bool(result.get("error"))})
    return steps


def checks(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The reward's checks: env assertions and expected actions, each with whether it passed."""
    evaluation = record.get("evaluation") or {}
    out = []
    for kind in ("env_assertions", "actions"):
        for check in evaluation.get(kind) or []:
            out.append({"kind": check.get("kind", kind), "name": check.get("name", "?"),
                        "arguments": json.dumps(check.get("arguments") or {}, ensure_ascii=False),
                        "passed": check.get("passed")})
    return out
