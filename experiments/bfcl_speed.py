"""BFCL tool-call decoding speed: plain greedy vs prompt lookup vs ToolSpec (vs ToolSpec + sidecar).

Every question is decoded by each decoder with the same local model on the
CPU, constrained to the tool grammar (``tool_choice`` required; several calls
allowed for the ``parallel`` category), as ``agentspec serve`` does.  The
prompt is computed once per question and its key/values are shared by all
decoders (so the measured time is the generation); ``e2e`` figures add that
one prefill.  Decoders:

* ``greedy``: one target forward per token (the reference);
* ``pld``: prompt-lookup decoding (n-gram copy from prompt and output, a chain of 10);
* ``toolspec``: schema + retrieval (+ recycling) drafts, cost-aware tree;
* ``toolspec+sidecar``: plus the small sidecar model's predicted call as a hint,
  started with the request and never awaited (its CPU time competes with the
  target's, and is inside the measured time).

Prints progress to stderr and, as the last stdout line, one JSON object keyed
by decoder (``exact_match``, ``tokens_per_forward``, ``forwards_per_call``,
``speedup_vs_greedy``, ``speedup_vs_pld``, accepted share by draft source,
time by phase, near ties, mismatches) plus ``meta``::

    python experiments/bfcl_speed.py --model qwen2.5-coder-0.5b --limit 5
    python experiments/bfcl_speed.py --data ../shared/data/bfcl/BFCL_v4_multiple.json --limit 20 \\
        --decoders greedy,toolspec
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bfcl"
CATEGORIES = ("simple_python", "multiple", "parallel", "live_simple")
DECODERS = ("greedy", "pld", "toolspec", "toolspec+sidecar")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gorilla_schema(value: Any) -> Any:
    """BFCL's Gorilla parameter types to JSON Schema (dict -> object, float -> number, tuple -> array, any -> {})."""
    if isinstance(value, list):
        return [gorilla_schema(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: gorilla_schema(item) for key, item in value.items()}
    kind = out.get("type")
    mapped = {"dict": "object", "float": "number", "tuple": "array"}.get(kind, kind) if isinstance(kind, str) else kind
    if mapped == "any":
        out.pop("type")
    elif mapped is not None:
        out["type"] = mapped
    return out


def load_questions(files: list[Path], limit: int) -> list[dict[str, Any]]:
    questions = []
    for path in files:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        questions.extend(rows[:limit] if limit else rows)
    return questions


def _wait_for_sidecars(timeout: float = 30.0) -> None:
    import threading

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(t.name == "agentspec-sidecar" for t in threading.enumerate()):
        time.sleep(0.01)


def _load_cost(path: Path) -> Any:
    """A forward cost table written by ``--save-cost``."""
    from agentspec.decoding.budget import ForwardCost

    table = json.loads(path.read_text())
    return ForwardCost(tuple(table["sizes"]), tuple(table["costs"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", help="BFCL question file (JSON lines); repeatable; "
                        f"default: the {', '.join(CATEGORIES)} files in {DATA}")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--sidecar-model", default="smollm2-135m")
    parser.add_argument("--limit", type=int, default=4, help="questions per file (0: all)")
    parser.add_argument("--decoders", default=",".join(DECODERS))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--budget", type=int, default=64, help="tree nodes per forward at most")
    parser.add_argument("--cost", default="measure", metavar="measure|default|FILE",
                        help="forward cost by tree size: measured here at start (a few seconds; it follows the "
                        "machine's load, and the tree budget with it), the default table, or a table saved with "
                        "--save-cost (the same figure again on the same machine)")
    parser.add_argument("--save-cost", metavar="FILE", help="write the forward cost table used, as JSON")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from agentspec.decoding.budget import DEFAULT_COST, measure_cost
    from agentspec.decoding.decoder import ToolSpecDecoder, default_drafters
    from agentspec.decoding.recycling_drafter import RecyclingDrafter
    from agentspec.decoding.retrieval_drafter import CallHistory
    from agentspec.decoding.sidecar import Sidecar
    from agentspec.decoding.stats import DraftStats
    from agentspec.engine.grammar import tool_grammar
    from agentspec.engine.kv_cache import TargetSequence
    from agentspec.engine.model import load_model
    from agentspec.models.registry import resolve
    from agentspec.serve.prompt import render_prompt
    from agentspec.serve.protocol import ChatRequest

    if args.threads:
        torch.set_num_threads(args.threads)
    decoders = [name.strip() for name in args.decoders.split(",") if name.strip()]
    unknown = set(decoders) - set(DECODERS)
    if unknown:
        parser.error(f"unknown decoders {sorted(unknown)}; known: {', '.join(DECODERS)}")
    if "greedy" not in decoders:
        decoders.insert(0, "greedy")  # the reference for exact match and speed-ups
    files = [Path(p) for p in args.data] if args.data else [DATA / f"BFCL_v4_{c}.json" for c in CATEGORIES]
    questions = load_questions(files, args.limit)
    load_before = os.getloadavg()
    began = time.perf_counter()
    lm = load_model(resolve(args.model))
    log(f"bfcl_speed: {len(questions)} questions, model {args.model}, decoders {', '.join(decoders)}, "
        f"{torch.get_num_threads()} threads")

    cost = measure_cost(lm) if args.cost == "measure" else DEFAULT_COST if args.cost == "default" else \
        _load_cost(Path(args.cost))
    if args.save_cost:
        Path(args.save_cost).write_text(json.dumps({"sizes": cost.sizes, "costs": cost.costs}) + "\n")
    log(f"bfcl_speed: forward cost by tree size {dict(zip(cost.sizes, cost.costs))}")
    history, history2 = CallHistory(), CallHistory()
    sidecar = Sidecar(load_model(resolve(args.sidecar_model))) if "toolspec+sidecar" in decoders else None
    made = {
        "greedy": ToolSpecDecoder(lm, []),
        "pld": ToolSpecDecoder(lm, [RecyclingDrafter(recycle=False)], cost=None),
        "toolspec": ToolSpecDecoder(lm, default_drafters(history), history=history, budget=args.budget, cost=cost),
        # Its own history: calls only from earlier questions, never the one toolspec just answered.
        "toolspec+sidecar": ToolSpecDecoder(lm, default_drafters(history2), history=history2, budget=args.budget,
                                            cost=cost, sidecar=sidecar),
    }
    totals = {name: DraftStats() for name in decoders}
    seconds = {name: 0.0 for name in decoders}
    exact = {name: 0 for name in decoders}
    mismatches: dict[str, list[dict[str, Any]]] = {name: [] for name in decoders}
    sidecar_seconds: list[float] = []
    prefill_total = 0.0
    skipped = []
    done = 0
    for index, row in enumerate(questions):
        tools = [{"type": "function", "function": gorilla_schema(f)} for f in row["function"]]
        parallel = row["id"].startswith("parallel")
        messages = row["question"][0]
        try:
            request = ChatRequest.model_validate({"model": args.model, "messages": messages, "tools": tools,
                                                  "tool_choice": "required", "parallel_tool_calls": parallel})
            prompt = lm.encode(render_prompt(lm, request))
            grammar = tool_grammar(request.tools, ll_tokenizer=lm.ll_tokenizer, parallel=parallel)
        except Exception as exc:  # a schema llguidance cannot take is reported, not fatal
            skipped.append({"id": row["id"], "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        functions = [tool["function"] for tool in tools]
        # One prefill per question, shared by every decoder through the prefix-reuse path.
        shared = TargetSequence(lm)
        t0 = time.perf_counter()
        shared.prefill(prompt[:-1])
        prefill_total += time.perf_counter() - t0
        reuse = (shared.length, shared.layers())
        results: dict[str, Any] = {}
        for name in decoders:
            options: dict[str, Any] = {"grammar": grammar, "tools": functions, "reuse": reuse, "messages": messages}
            if index == 0 and done == 0:
                made[name].generate(prompt, max_tokens=8, **options)  # warm-up, not timed
            result = made[name].generate(prompt, max_tokens=args.max_tokens, **options)
            _wait_for_sidecars()  # a cancelled sidecar finishes its step: keep it out of the next timing
            if name == "toolspec+sidecar" and result.stats.seconds.get("sidecar") is not None:
                sidecar_seconds.append(result.stats.seconds["sidecar"])
            results[name] = result
            totals[name].merge(result.stats)
            seconds[name] += result.seconds
        reference = results["greedy"]
        for name in decoders:
            result = results[name]
            if result.tokens == reference.tokens:
                exact[name] += 1
            else:
                at = next((i for i, (a, b) in enumerate(zip(result.tokens, reference.tokens)) if a != b),
                          min(len(result.tokens), len(reference.tokens)))
                mismatches[name].append({
                    "id": row["id"], "position": at,
                    "greedy_margin": reference.choices[at].margin if at < len(reference.choices) else None,
                    "margin": result.choices[at].margin if at < len(result.choices) else None,
                })
        done += 1
        log(f"  {row['id']}: " + ", ".join(
            f"{n} {results[n].stats.forwards}f/{results[n].seconds:.2f}s" for n in decoders)
            + f"  {reference.text[:70]!r}")

    greedy_s, pld_s = seconds["greedy"], seconds.get("pld")
    per_call_prefill = prefill_total / max(done, 1)
    report: dict[str, Any] = {}
    for name in decoders:
        stats = totals[name].as_dict()
        report[name] = {
            "exact_match": round(exact[name] / max(done, 1), 4),
            "tokens_per_forward": stats["tokens_per_forward"],
            "forwards_per_call": round(totals[name].forwards / max(done, 1), 2),
            "tokens_per_call": round(totals[name].tokens / max(done, 1), 2),
            "decode_seconds_per_call": round(seconds[name] / max(done, 1), 3),
            "speedup_vs_greedy": round(greedy_s / seconds[name], 3) if seconds[name] else None,
            "speedup_vs_pld": round(pld_s / seconds[name], 3) if pld_s and seconds[name] else None,
            "e2e_speedup_vs_greedy": round((greedy_s + prefill_total) / (seconds[name] + prefill_total), 3)
            if seconds[name] else None,
            "forward_reduction_vs_greedy": round(totals["greedy"].forwards / totals[name].forwards, 3)
            if totals[name].forwards else None,
            "accepted_share_by_source": stats["accepted_share_by_source"],
            "acceptance_rate_by_source": stats["acceptance_rate_by_source"],
            "tree_nodes_per_forward": stats["tree_nodes_per_forward"],
            "seconds_by_phase": stats["seconds"],
            "near_ties": len(totals[name].near_ties),
            "near_tie_margins": sorted(t["margin"] for t in totals[name].near_ties)[:10],
            "rechecks": totals[name].rechecks,
            "mismatches": mismatches[name],
        }
    if sidecar_seconds:
        report["toolspec+sidecar"]["sidecar_seconds_per_call"] = round(statistics.mean(sidecar_seconds), 3)
    report["meta"] = {
        "model": args.model, "questions": done, "files": [p.name for p in files], "limit": args.limit,
        "max_tokens": args.max_tokens, "budget": args.budget,
        "forward_cost": dict(zip(cost.sizes, cost.costs)),
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "prefill_seconds_per_call": round(per_call_prefill, 3),
        "sidecar_model": args.sidecar_model if sidecar else None, "skipped": skipped,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
