"""``agentspec mine``: mine a macro library (handler: :func:`agentspec.cli.commands.mine.mine_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import POSITIVE, add_bench, add_bench_options, add_data_dir, add_role_flags, number, out_file

DEFAULT_TEMPERATURE = 0.7
"""Sampling temperature for a model speculator when none is given: several samples must be able to differ."""


def add_parser(sub: Any) -> None:
    """Register ``mine``."""
    mine = sub.add_parser("mine", help="mine a macro library from successful trajectories")
    add_bench(mine)
    mine.add_argument("--split", default="train", help="the training split: its gold calls, and the tasks --runs may cover")
    add_role_flags(mine, "speculator", "the speculator's model", also=[
        "noisy-oracle:P (the trajectories' own calls, each replaced with probability 1-P)",
        "learned:FILE (a file of `agentspec speculator fit`)"])
    mine.add_argument("--runs", nargs="+", default=[], metavar="DIR",
                      help="run folders (or results.json files) to mine too: an agentspec run's episodes of the "
                      "split's tasks, or every episode of a recorded run of a real agent (tau2-bench's simulations)")
    mine.add_argument("--no-gold", action="store_true", help="mine only --runs, not the split's gold calls")
    mine.add_argument("--min-reward", type=number(float, ge=0, le=1), default=None,
                      help="mine a run episode from this reward (default: 1 for agentspec runs, 0 for recordings)")
    add_data_dir(mine)
    add_bench_options(mine)
    mine.add_argument("--out", required=True, type=out_file, help="where to write the library, e.g. runs/macros.json; the same "
                      "inputs always give the same bytes")
    mine.add_argument("--samples", type=POSITIVE, default=4, help="speculator continuations per training state")
    mine.add_argument("--temperature", type=number(float, ge=0), default=None,
                      help=f"model speculator temperature (default {DEFAULT_TEMPERATURE})")
    mine.add_argument("--seed", type=number(int, ge=0), default=0, help="seeds the noisy oracle and --max-states sampling")
    mine.add_argument("--max-states", type=POSITIVE, default=None, help="label at most N training states (drawn with --seed)")
    mine.add_argument("--concurrency", type=POSITIVE, default=1, help="speculator requests in flight")
    mine.add_argument("--delta", type=number(float, gt=0, lt=1), default=0.05,
                      help="quantile of the Beta posterior used as lower bound")
    mine.add_argument("--n-min", type=POSITIVE, default=3, help="minimum labels a macro needs")
    mine.add_argument("--tau", type=number(float, ge=0, le=1), default=0.5, help="minimum lower bound of reliability")
    mine.add_argument("--top", type=POSITIVE, default=200, help="keep at most this many macros (best score first)")
    mine.add_argument("--min-length", type=number(int, ge=2, le=8), default=2, help="shortest macro, in calls")
    mine.add_argument("--max-length", type=number(int, ge=2, le=8), default=4, help="longest macro, in calls")
    mine.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    mine.set_defaults(handler="agentspec.cli.commands.mine:mine_command")
