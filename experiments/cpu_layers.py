"""Forward time by tree size on the CPU: stock transformers layers vs agentspec's packed layers and folded GQA.

Loads one model twice in one process: ``stock`` (``F.linear`` layers, transformers' ``sdpa``
attention) and ``agentspec`` (oneDNN-packed linear layers with 1-3 rows padded to 4,
:mod:`agentspec.engine.packed_linear`; grouped-query attention folded into query rows,
:mod:`agentspec.engine.grouped_attention`).  For each, after a ``--context``-token cached prefix,
it times tree forwards of 1, 2, 4, 8, 16, 32 and 64 tokens (median of ``--repeats``, the two
variants alternating shape by shape so machine noise hits both alike), checks that both variants
pick the same greedy token after the prefix, and prints one JSON line::

    python experiments/cpu_layers.py --model qwen2.5-coder-1.5b --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

SIZES = (1, 2, 4, 8, 16, 32, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import torch

    from agentspec.engine.kv_cache import TargetSequence
    from agentspec.engine.model import load_model
    from agentspec.engine.token_tree import TokenTree
    from agentspec.models.registry import resolve

    if args.threads:
        torch.set_num_threads(args.threads)
    source = resolve(args.model)
    stock = load_model(source, linear="stock")
    stock.model.set_attn_implementation("sdpa")  # transformers' own attention: the reference
    ours = load_model(source, linear="packed")
    prefix = [100 + (7 * i) % 20000 for i in range(args.context)]
    sequences: dict[str, Any] = {}
    first_token = {}
    for name, lm in (("stock", stock), ("agentspec", ours)):
        seq = TargetSequence(lm)
        logits = seq.prefill(prefix)
        first_token[name] = int(torch.argmax(logits))
        sequences[name] = seq

    def timed(seq: Any, size: int) -> float:
        tree = TokenTree(root=7, budget=size)
        tree.add_path(range(200, 199 + size), "calibration")
        began = time.perf_counter()
        seq.forward_tree(tree)
        spent = time.perf_counter() - began
        seq.keep(args.context, [])
        return spent

    ms: dict[str, dict[int, float]] = {"stock": {}, "agentspec": {}}
    for size in SIZES:
        samples: dict[str, list[float]] = {"stock": [], "agentspec": []}
        for _ in range(2):
            for name in samples:
                timed(sequences[name], size)  # warm this shape up
        for _ in range(args.repeats):
            for name in samples:
                samples[name].append(timed(sequences[name], size))
        for name in samples:
            ms[name][size] = round(statistics.median(samples[name]) * 1e3, 1)
    report = {
        name: {"ms_by_tree_size": ms[name],
               "cost_vs_one_token": {size: round(ms[name][size] / ms[name][1], 3) for size in SIZES}}
        for name in ms
    }
    report["speedup_by_tree_size"] = {size: round(ms["stock"][size] / ms["agentspec"][size], 3) for size in SIZES}
    report["meta"] = {"model": args.model, "context": args.context, "repeats": args.repeats,
                      "threads": torch.get_num_threads(), "same_greedy_token": len(set(first_token.values())) == 1}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
