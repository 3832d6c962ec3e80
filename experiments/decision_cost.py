"""What one real decision costs when authority and speculator share a CPU: alone, at once, guess first.

The first decision of a tau2-telecom test task (solo prompt, about 9,000 tokens, prefix-cached after a warm-up),
asked of ``qwen2.5-coder-1.5b`` (the authority) and ``qwen2.5-coder-0.5b`` (its speculator) on one
``agentspec serve --decoder toolspec``, in four ways, ``--repeats`` times each:

* ``authority_alone``: the authority decides by itself;
* ``speculator_alone``: the speculator guesses by itself;
* ``authority_with_guess``: the authority decides with the speculator's guess as a draft hint from its first
  forward (``agentspec_predicted_calls``): what ``--draft-first`` does after the guess;
* ``both_at_once``: both decide at the same time (what ``sa`` does): each one's time, and the pair's.

Reported per way: the median seconds, target forwards, the call made, and the forwards' share of the time.  The
last stdout line is JSON.  Greedy decoding: every way makes the same call (checked).

    python experiments/decision_cost.py --data-dir ../shared/data/tau2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentspec.assembly import assemble  # noqa: E402
from agentspec.bench.registry import open_bench  # noqa: E402
from agentspec.roles import open_roles  # noqa: E402
from agentspec.run_spec import RunSpec  # noqa: E402
from agentspec.runtime.policies.protocol import Decision, Policy, PredictedHistory  # noqa: E402


async def timed(policy: Policy, history: Any) -> tuple[float, Decision]:
    started = time.perf_counter()
    decision = await policy.decide(history)
    return time.perf_counter() - started, decision


async def at_once(authority: Policy, speculator: Policy) -> dict[str, tuple[float, Decision]]:
    out: dict[str, tuple[float, Decision]] = {}
    started = time.perf_counter()

    async def one(name: str, policy: Policy) -> None:
        out[name] = await timed(policy, [])

    async with anyio.create_task_group() as group:
        group.start_soon(one, "authority", authority)
        group.start_soon(one, "speculator", speculator)
    out["pair"] = (time.perf_counter() - started, out["authority"][1])
    return out


def summary(samples: list[tuple[float, Decision]]) -> dict[str, Any]:
    return {"median_s": round(statistics.median(s for s, _ in samples), 2),
            "runs_s": [round(s, 2) for s, _ in samples],
            "forwards": [d.forwards for _, d in samples],
            "calls": sorted({d.call.canonical() if d.call else "done" for _, d in samples})}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bench = open_bench("tau2-telecom", args.data_dir)
    task = bench.tasks(args.split, limit=args.task + 1)[args.task]
    spec = RunSpec.of(bench="tau2-telecom", agent="llm", solo=True, modes="sa", agent_model=args.authority_model,
                      speculator_model=args.speculator_model, max_tokens=128, speculator_hints=True)
    ways: dict[str, list[tuple[float, Decision]]] = {name: [] for name in (
        "authority_alone", "speculator_alone", "authority_with_guess", "both_at_once.authority",
        "both_at_once.speculator", "both_at_once.pair")}
    # Both are local models, served by one child `agentspec serve --decoder toolspec` (or the --base-url one); the
    # environment's model endpoints do not apply.
    async with open_roles(spec, server=args.base_url, env={}) as roles:
        parts = assemble(roles.spec, spec.modes[0], bench, task, roles.clients, solo=True)
        authority, speculator = parts.authority, parts.speculator
        assert speculator is not None
        warm = [await timed(authority, []), await timed(speculator, [])]  # prefills the prompt once
        for _ in range(args.repeats):
            ways["authority_alone"].append(await timed(authority, []))
            guess = await timed(speculator, [])
            ways["speculator_alone"].append(guess)
            hinted = PredictedHistory([], [guess[1].call] if guess[1].call else [])
            ways["authority_with_guess"].append(await timed(authority, hinted))
            for name, sample in (await at_once(authority, speculator)).items():
                ways[f"both_at_once.{name}"].append(sample)
    report = {name: summary(samples) for name, samples in ways.items()}
    calls = {call for name in ("authority_alone", "authority_with_guess", "both_at_once.authority")
             for call in report[name]["calls"]}
    report["conditions"] = {"task": task.id, "authority": args.authority_model, "speculator": args.speculator_model,
                            "repeats": args.repeats, "warm_up_s": [round(s, 1) for s, _ in warm],
                            "authority_same_call_every_way": len(calls) == 1}
    return report


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/tau2")
    parser.add_argument("--split", default="test")
    parser.add_argument("--task", type=int, default=0, help="index of the task in the split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--authority-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--speculator-model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--base-url", help="a running `agentspec serve --decoder toolspec` with both models")
    return parser.parse_args()


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, parse())))
