"""Aggregate decoding throughput of the embedded engine with N concurrent greedy requests vs one at a time.

For each N in ``--concurrency``, N different prompts are generated greedily
(``--tokens`` tokens each, end of text ignored so every request decodes the
same number of tokens) through one :class:`agentspec.engine.scheduler.Engine`,
all at once; the reference is the same N requests one after another on the
same engine (its ``N = 1`` case).  Prompts differ between requests and between
runs of different N (fresh text, no prefix reuse across requests).  Reports
aggregate tokens/s (generated tokens over wall time, prefill included), the
speed-up over one-at-a-time decoding, whether each concurrent output equals
that prompt decoded alone token for token, and the engine's forwards.  The
last stdout line is JSON keyed by concurrency::

    nice -n 10 python experiments/engine_batching.py --model qwen2.5-coder-0.5b --concurrency 1,2,4,8 --tokens 48
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio

TOPICS = ("a linked list", "a binary heap", "a trie", "an LRU cache", "a ring buffer", "a bloom filter",
          "a union-find", "a skip list", "a segment tree", "a priority queue", "a hash map", "a deque",
          "an interval tree", "a B-tree", "a rope", "a radix tree")
LANGUAGES = ("Python", "Rust", "Go", "C", "TypeScript")


def prompts(lm: Any, count: int, offset: int) -> list[list[int]]:
    """``count`` distinct chat prompts (made-up coding tasks)."""
    out = []
    for i in range(offset, offset + count):
        text = f"Write {TOPICS[i % len(TOPICS)]} in {LANGUAGES[i % len(LANGUAGES)]} with a short docstring."
        messages = [{"role": "user", "content": text}]
        rendered = lm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out.append(lm.encode(rendered))
    return out


async def _one(engine: Any, prompt: list[int], params: Any) -> list[int]:
    tokens: list[int] = []
    async for step, _finish in engine.generate(prompt, params):
        tokens.extend(t.id for t in step)
    return tokens


async def _concurrent(engine: Any, batch: list[list[int]], params: Any) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in batch]

    async def run(i: int) -> None:
        results[i] = await _one(engine, batch[i], params)

    async with anyio.create_task_group() as group:
        for i in range(len(batch)):
            group.start_soon(run, i)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from agentspec.engine.generation import SamplingParams
    from agentspec.engine.model import load_model
    from agentspec.engine.scheduler import Engine, PrefixCache
    from agentspec.models.registry import resolve

    if args.threads:
        torch.set_num_threads(args.threads)
    levels = [int(x) for x in args.concurrency.split(",")]
    lm = load_model(resolve(args.model))
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True)
    # No prefix reuse: every request computes its whole prompt, sequential and concurrent alike.
    engine = Engine(lm, prefix_cache=PrefixCache(max_entries=0))
    anyio.run(_one, engine, prompts(lm, 1, 99)[0], SamplingParams(max_tokens=4))  # warm up kernels
    report: dict[str, Any] = {}
    base_rate = None
    offset = 0
    for n in levels:
        batch = prompts(lm, n, offset)
        offset += n
        began = time.perf_counter()
        alone = [anyio.run(_one, engine, p, params) for p in batch]
        seq_s = time.perf_counter() - began
        forwards_before = engine.stats.forwards
        began = time.perf_counter()
        together = anyio.run(_concurrent, engine, batch, params)
        wall = time.perf_counter() - began
        generated = sum(len(t) for t in together)
        rate = generated / wall
        seq_rate = sum(len(t) for t in alone) / seq_s
        base_rate = base_rate or (rate if n == 1 else seq_rate)
        report[str(n)] = {
            "tokens_per_s": round(rate, 2),
            "sequential_tokens_per_s": round(seq_rate, 2),
            "speedup_vs_1": round(rate / seq_rate, 3),
            "identical": together == alone,
            "wall_s": round(wall, 2),
            "forwards": engine.stats.forwards - forwards_before,
            "generated_tokens": generated,
        }
        print(json.dumps({str(n): report[str(n)]}), flush=True)
    report["meta"] = {"model": args.model, "tokens": args.tokens, "threads": torch.get_num_threads(),
                      "linear": lm.linear, "baseline": "the same requests one after another on the same engine"}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
