"""Engines side by side on the CPU: the embedded engine (fp32 torch, ToolSpec) and llama.cpp (Q4_K_M).

For each engine this starts ``agentspec serve --engine ENGINE`` on the same
registry model (embedded: ``--decoder toolspec``, the safetensors converted
from the GGUF; llama-cpp: the Q4_K_M GGUF itself), one engine at a time so they
never share the CPU, and measures through agentspec's own client:

* **BFCL**: each question once (tools in the prompt, ``tool_choice`` required,
  greedy, ``--max-tokens``): latency per call, generated tokens per second,
  whether a listed function was called, and whether both engines made the same
  call;
* **tau2 telecom solo**: the engine's model as the speculator and, as the
  authority, the oracle (the gold calls; ``--authority oracle``, the default)
  or the engine's model too (``--authority engine``).  One ``agentspec run
  --record`` on this machine (every speculator call made and timed: seconds
  per call, next-call hit rate), then ``--replay`` of it with ``--latency-model
  smc-paper``: the action-level mode ratios (sequential's task time over the
  mode's) those predictions earn, on one clock for both engines.

Progress goes to stderr; the last stdout line is one JSON object keyed by engine::

    nice -n 10 python experiments/engines.py --data-dir ../shared/data/tau2 --limit 1 --max-steps 6 --bfcl-limit 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_speed import DATA, gorilla_schema, load_questions
from real_speculator import agentspec_run

from agentspec.roles import open_roles
from agentspec.run_spec import RunSpec
from agentspec.types import Message, ToolSpec

ENGINES: dict[str, list[str]] = {
    "embedded": ["--engine", "embedded", "--decoder", "toolspec"],
    "llama-cpp": ["--engine", "llama-cpp"],
}
MODE_KEYS = ["reward_mean", "mean_task_wall_s", "mean_authority_wait_s", "authority_calls", "authority_skipped",
             "speculator_calls", "commits_sa", "commits_spork", "probes", "probe_hits", "probe_cached_tokens",
             "probe_prompt_tokens", "speculator_hit_rate", "speculator_name_hit_rate", "failed_episodes",
             "first_error"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def served(engine: str, model: str, max_tokens: int) -> Iterator[tuple[str, float]]:
    """``agentspec serve --engine ENGINE`` in a child process: (base URL, seconds until ready)."""
    command = [sys.executable, "-m", "agentspec.cli", "serve", *ENGINES[engine], "--model", model, "--port", "0",
               "--max-tokens", str(max_tokens)]
    env = {**os.environ, "AGENTSPEC_PARENT_PID": str(os.getpid())}
    started = time.perf_counter()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "ready":
                yield str(event["base_url"]), time.perf_counter() - started
                break
        else:
            raise SystemExit(f"{engine}: the server exited with {process.wait()} before it was ready")
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def bfcl_tools(row: dict[str, Any]) -> list[ToolSpec]:
    functions = [gorilla_schema(f) for f in row["function"]]
    return [ToolSpec(name=f["name"], description=f.get("description", ""), parameters=f.get("parameters") or {})
            for f in functions]


async def bfcl(base_url: str, model: str, questions: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    """Each question once through agentspec's client (after one untimed warm-up call): the engine's model as a
    solo agent, opened as a run opens it (the environment's model endpoints do not apply)."""
    spec = RunSpec.of(agent="llm", solo=True, agent_model=model)
    latencies: list[float] = []
    tokens: list[int] = []
    calls: dict[str, Any] = {}
    valid = 0
    async with open_roles(spec, server=base_url, env={}) as roles:
        client = roles.clients["agent"]
        await client.chat([Message(role="user", content="Hello")], max_tokens=4)
        for row in questions:
            tools = bfcl_tools(row)
            messages = [Message(role=m["role"], content=m["content"]) for m in row["question"][0]]
            started = time.perf_counter()
            result = await client.chat(messages, tools=tools, tool_choice="required", max_tokens=max_tokens,
                                       temperature=0.0)
            latencies.append(time.perf_counter() - started)
            tokens.append(result.usage.completion_tokens if result.usage else 0)
            made = [{"name": c.name, "arguments": c.arguments} for c in result.message.tool_calls]
            calls[row["id"]] = made
            valid += bool(made) and all(c["name"] in {t.name for t in tools} for c in made)
            log(f"  {row['id']}: {latencies[-1]:.2f} s, {tokens[-1]} tokens, {made[:1] or result.message.content!r}")
    return {
        "questions": len(questions),
        "latency_mean_s": round(statistics.fmean(latencies), 3),
        "latency_p50_s": round(statistics.median(latencies), 3),
        "tokens_per_s": round(sum(tokens) / sum(latencies), 2),
        "tokens_per_call": round(statistics.fmean(tokens), 1),
        "valid_call_share": round(valid / len(questions), 3),
        "calls": calls,
    }


def tau2(base_url: str, model: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Record one run with the engine's model as the speculator, then replay it on the virtual clock.

    Recording (``--record``) lets the speculator fill its chain before each
    authority decision, so every speculator call is made and timed on this
    machine; the replay (``--latency-model smc-paper``) gives the mode ratios
    those predictions earn at GPU-scale speeds, the same clock for both engines.
    """
    endpoint = f"{base_url}#{model}"
    authority = ["--agent", "oracle"] if args.authority == "oracle" else ["--agent-model", endpoint]
    common = ["--split", args.split, "--limit", str(args.limit), *authority, "--speculator-model", endpoint,
              "--max-steps", str(args.max_steps), "--depth", str(args.depth), "--data-dir", args.data_dir]
    started = time.perf_counter()
    recorded = agentspec_run([*common, "--mode", "sequential,sa", "--record", str(folder / "rec")])
    record_s = time.perf_counter() - started
    sa = recorded["modes"]["sa"]
    replayed = agentspec_run([*common, "--mode", args.modes, "--replay", str(folder / "rec"), "--latency-model",
                              "smc-paper", "--out", str(folder / "replay")])
    calls = sa.get("speculator_calls") or 0
    return {
        "record_s": round(record_s, 1),
        "speculator_calls": calls,
        "speculator_s_per_call": round(record_s / calls, 2) if calls else None,
        "speculator_hit_rate": sa.get("speculator_hit_rate"),
        "speculator_name_hit_rate": sa.get("speculator_name_hit_rate"),
        "ratio_vs_sequential": replayed.get("speedup_vs_sequential"),
        "modes": {mode: {k: s.get(k) for k in MODE_KEYS} for mode, s in replayed["modes"].items()},
    }


def agreement(report: dict[str, Any]) -> float | None:
    """Share of BFCL questions where every engine made the same calls."""
    engines = [r["bfcl"]["calls"] for r in report.values() if "bfcl" in r]
    if len(engines) < 2:
        return None
    ids = list(engines[0])
    same = sum(all(e.get(i) == engines[0][i] for e in engines[1:]) for i in ids)
    return round(same / len(ids), 3) if ids else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "tau2"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=1, help="tau2 tasks (0: skip tau2)")
    parser.add_argument("--max-steps", type=int, default=6, help="messages per tau2 episode at most")
    parser.add_argument("--modes", default="sequential,sa,smc", help="modes of the replay")
    parser.add_argument("--depth", type=int, default=1, help="speculator chain depth")
    parser.add_argument("--out", default="runs/engines", help="recordings and replays, one folder per engine")
    parser.add_argument("--authority", choices=["oracle", "engine"], default="oracle")
    parser.add_argument("--bfcl", action="append", help="BFCL question file; default: simple_python and multiple")
    parser.add_argument("--bfcl-limit", type=int, default=1, help="questions per BFCL file (0: skip BFCL)")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    files = [Path(p) for p in args.bfcl] if args.bfcl else [DATA / f"BFCL_v4_{c}.json" for c in ("simple_python", "multiple")]
    questions = load_questions(files, args.bfcl_limit) if args.bfcl_limit else []
    report: dict[str, Any] = {}
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        log(f"engines: {engine} on {args.model}")
        with served(engine, args.model, args.max_tokens) as (base_url, ready_s):
            figures: dict[str, Any] = {"ready_s": round(ready_s, 1)}
            if questions:
                figures["bfcl"] = anyio.run(bfcl, base_url, args.model, questions, args.max_tokens)
            if args.limit:
                figures["tau2"] = tau2(base_url, args.model, args, Path(args.out) / engine)
        report[engine] = figures
        log(f"engines: {engine}: {json.dumps({k: v for k, v in figures.items() if k != 'bfcl'})[:600]}")
    report["meta"] = {"model": args.model, "bfcl_questions": len(questions), "tau2_tasks": args.limit,
                      "authority": args.authority, "modes": args.modes, "depth": args.depth, "max_steps": args.max_steps, "cpus": os.cpu_count(),
                      "load_avg": [round(x, 2) for x in os.getloadavg()], "same_bfcl_calls": agreement(report)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
