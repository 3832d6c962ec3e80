"""``agentspec score``: score a file of answers against a bench's reference answers, or each answer file a run
wrote (its ``results.json`` lists them in ``summary.official_outputs``).

    agentspec score --bench gaia --answers submission.jsonl --data-dir DIR [--split validation]
    agentspec score --bench gaia --answers RUN_DIR --data-dir DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentspec.cli.flags import add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``score``."""
    score = sub.add_parser("score", help="score answers (a leaderboard submission file) against the reference answers")
    score.add_argument("--bench", required=True, help="benchmark name, e.g. gaia")
    score.add_argument("--answers", required=True,
                       help="JSON lines with task_id and model_answer (GAIA's submission format), or a run's --out "
                       "folder (or its results.json): each answer file the run wrote")
    score.add_argument("--split", help="the split the answers are for (default: the bench's own, gaia: validation)")
    add_data_dir(score)
    score.set_defaults(handler="agentspec.cli.score:score_command")


def score_command(args: argparse.Namespace) -> dict[str, Any]:
    """Score ``--answers`` with the bench's own scorer (GAIA's official rules): one file, or a run's answer files,
    each scored on its own (``scores``: file -> its figures)."""
    from agentspec.bench.protocol import AnswerScorer
    from agentspec.bench.registry import open_bench
    from agentspec.errors import ConfigError
    from agentspec.results import RESULTS_FILE, Results

    bench = open_bench(args.bench, args.data_dir)
    if not isinstance(bench, AnswerScorer):
        raise ConfigError(f"{args.bench} has no answers to score against: agentspec score is for benches like gaia")
    split = args.split or bench.default_split
    answers = Path(args.answers)
    if not (answers.is_dir() or answers.name == RESULTS_FILE):
        return {"bench": args.bench, **bench.score_answers(answers, split=split)}
    results = Results.load(answers)
    if results.summary.bench != args.bench:
        raise ConfigError(f"--answers {answers}: a run of {results.summary.bench}, not {args.bench}")
    if not results.summary.official_outputs:
        raise ConfigError(f"--answers {answers}: the run wrote no answer files (summary.official_outputs is empty)")
    return {"bench": args.bench, "scores": {file: bench.score_answers(file, split=split)
                                            for file in results.summary.official_outputs}}
