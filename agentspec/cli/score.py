"""``agentspec score``: score a file of answers against a bench's reference answers, or each answer file a run
wrote (its ``results.json`` lists them in ``summary.official_outputs``); or re-score a recorded run of a real agent
(tau2-bench's simulation files) with agentspec's environment and evaluator, beside the recording's own scores.

    agentspec score --bench gaia --answers submission.jsonl --data-dir DIR [--split validation]
    agentspec score --bench gaia --answers RUN_DIR --data-dir DIR
    agentspec score --bench tau2-telecom --runs traces/sierra_gpt-4.1_telecom_solo.json --data-dir DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentspec.cli.flags import add_bench, add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``score``."""
    score = sub.add_parser("score", help="score answers (a leaderboard submission file) against the reference answers, "
                           "or re-score recorded runs of real agents")
    add_bench(score)
    what = score.add_mutually_exclusive_group(required=True)
    what.add_argument("--answers",
                      help="JSON lines with task_id and model_answer (GAIA's submission format), or a run's --out "
                      "folder (or its results.json): each answer file the run wrote")
    what.add_argument("--runs", nargs="+", metavar="FILE",
                      help="recorded runs of real agents (tau2-bench's simulation files): each trajectory's calls, "
                      "agent's and user's, replayed through agentspec's environment and evaluator; per simulation "
                      "our reward beside the recorded one and the checks that differ")
    score.add_argument("--split", help="the split the answers are for (default: the bench's own, gaia: validation)")
    add_data_dir(score)
    score.set_defaults(handler="agentspec.cli.score:score_command")


def score_command(args: argparse.Namespace) -> dict[str, Any]:
    """Score ``--answers`` with the bench's own scorer (GAIA's official rules): one file, or a run's answer files,
    each scored on its own (``scores``: file -> its figures); or re-score ``--runs`` recordings."""
    from agentspec.bench.protocol import AnswerScorer
    from agentspec.bench.registry import open_bench
    from agentspec.errors import ConfigError
    from agentspec.results import RESULTS_FILE, Results

    if args.runs:
        from agentspec.cli.commands.rescore import rescore_recordings

        return rescore_recordings(args.bench, args.runs, args.data_dir)
    bench = open_bench(args.bench, args.data_dir)
    if not isinstance(bench, AnswerScorer):
        raise ConfigError(f"{args.bench} has no answers to score against: agentspec score --answers is for benches "
                          "like gaia (--runs re-scores recorded runs)")
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
