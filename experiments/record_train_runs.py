"""Record a real authority's own runs of tau2 telecom train tasks, to fit a learned speculator on its habits.

    python experiments/record_train_runs.py --limit 10 --out runs/real-learned/train-1p5b
    agentspec speculator fit --bench tau2-telecom --split train --runs runs/real-learned/train-1p5b --no-gold \\
      --min-reward 0 --data-dir ../shared/data/tau2 --out runs/real-learned/spec-1p5b.json

The episodes are played as ``experiments/real_wall.py`` plays them (solo, greedy, ``--max-tokens`` and
``--max-calls`` alike), sequentially, with the model served for the run (or at ``--base-url``).  The run resumes
where an earlier one with the same ``--out`` stopped.  ``--min-reward 0`` fits on every episode: the point is to
predict what this authority does, right or wrong for the task.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentspec import RunSpec, run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data/tau2")
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--authority-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint serving the model (default: served here)")
    parser.add_argument("--max-calls", type=int, default=8, help="authority decisions per episode")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spec = RunSpec.of(bench="tau2-telecom", data_dir=args.data_dir, split=args.split, limit=args.limit, solo=True,
                      agent="llm", agent_model=args.authority_model, agent_base_url=args.base_url, modes="sequential",
                      max_tokens=args.max_tokens, max_calls=args.max_calls, out=args.out, resume=True, progress=False)
    results = run(spec)
    episodes = results.episodes["sequential"]
    print(json.dumps({"episodes": len(episodes), "reward_mean": sum(e.reward or 0 for e in episodes) / len(episodes),
                      "out": args.out}))


if __name__ == "__main__":
    main()
