"""``agentspec score``: score a file of answers against a bench's reference answers
(handler: :func:`agentspec.bench.commands.score_command`).

    agentspec score --bench gaia --answers submission.jsonl --data-dir DIR [--split validation]
"""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``score``."""
    score = sub.add_parser("score", help="score answers (a leaderboard submission file) against the reference answers")
    score.add_argument("--bench", required=True, help="benchmark name, e.g. gaia")
    score.add_argument("--answers", required=True,
                       help="JSON lines with task_id and model_answer (GAIA's submission format)")
    score.add_argument("--split", help="the split the answers are for (default: the bench's own, gaia: validation)")
    add_data_dir(score)
    score.set_defaults(handler="agentspec.bench.commands:score_command")
