"""``agentspec speculator fit|score``: a learned speculator, fitted on trajectories and scored on held-out tasks
(handlers: :mod:`agentspec.cli.commands.speculator`).

    agentspec speculator fit --bench tau2-telecom --split train --data-dir DIR --out runs/spec.json
    agentspec speculator score --bench tau2-telecom --split test --speculator runs/spec.json [--lookahead]
    agentspec speculator fit --bench gaia --split validation --backend none --bench-option search=local --out F.json

Both open the bench as ``agentspec run`` does (``--backend``, ``--bench-option KEY=VALUE``), so a bench that
needs a sandbox backend or its own settings is fitted and scored the way it is run.
"""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import POSITIVE, add_bench, add_bench_options, add_data_dir, add_unverified_data, number


def add_parser(sub: Any) -> None:
    """Register ``speculator`` with its ``fit`` and ``score`` subcommands."""
    speculator = sub.add_parser("speculator", help="fit or score a learned speculator (no model: tables from past runs)")
    commands = speculator.add_subparsers(dest="speculator_command", required=True)

    fit = commands.add_parser("fit", help="fit a speculator on a split's gold calls and earlier runs")
    add_bench(fit)
    fit.add_argument("--split", default="train", help="the split to fit on (its gold calls; --runs episodes of its tasks)")
    fit.add_argument("--runs", nargs="+", default=[], metavar="DIR",
                     help="agentspec run folders (or results.json files) whose successful episodes of the split's "
                     "tasks it also learns from, and recorded runs of real agents (tau2-bench's simulation files) "
                     "whose every episode it learns from")
    fit.add_argument("--no-gold", action="store_true", help="fit on --runs only, not the split's gold calls")
    fit.add_argument("--hold-out", nargs="+", default=[], metavar="FILE",
                     help="recorded runs to score or replay the speculator on later: their tasks' gold calls are left "
                     "out of the fit (leave one recording out: fit on the others with --runs)")
    fit.add_argument("--min-reward", type=number(float, ge=0, le=1), default=None,
                     help="learn from a run episode from this reward (default: 1 for agentspec runs, 0 for "
                     "recordings: a real agent's failures are its behaviour too)")
    fit.add_argument("--seed", type=number(int, ge=0), default=0, help="recorded in the artifact")
    fit.add_argument("--lookahead-cap", type=number(int, ge=0), default=None, metavar="N",
                     help="at most N look-ahead calls per prediction wherever the file is used (default: all probes)")
    add_data_dir(fit)
    add_unverified_data(fit)
    add_bench_options(fit)
    fit.add_argument("--out", required=True, help="the speculator file to write, e.g. runs/spec.json (the same "
                     "inputs give the same bytes)")
    fit.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    fit.set_defaults(handler="agentspec.cli.speculator:on_data", on_data="fit_command")

    score = commands.add_parser("score", help="replay a split's reference calls and score the next-call guesses")
    add_bench(score)
    score.add_argument("--split", required=True, help="the split to score (none of its tasks may be in the fit)")
    score.add_argument("--speculator", metavar="FILE", help="a file written by `agentspec speculator fit`")
    score.add_argument("--folds", type=number(int, ge=2), default=None,
                       help="instead of --speculator: K-fold cross-validation on the split itself")
    score.add_argument("--lookahead", action="store_true",
                       help="let the speculator run its read-only look-ahead calls (in a fork) before guessing")
    score.add_argument("--lookahead-cap", type=number(int, ge=0), default=None, metavar="N",
                       help="at most N look-ahead calls per step (default: the file's cap, else all probes)")
    score.add_argument("--learn-online", action="store_true",
                       help="learn from each task once it is scored (in order), as a run's --learn-online does")
    score.add_argument("--runs", nargs="+", default=[], metavar="DIR",
                       help="score against these runs' episodes of the split's tasks instead of the gold calls (how "
                       "well it predicts a real authority's own calls): agentspec runs, or recorded runs of real "
                       "agents (tau2-bench's simulation files)")
    score.add_argument("--min-reward", type=number(float, ge=0, le=1), default=None,
                       help="with --runs: an episode is a reference from this reward (default: 1 for agentspec runs, "
                       "0 for recordings: every episode)")
    score.add_argument("--limit", type=POSITIVE, default=None, help="score at most N tasks of the split")
    score.add_argument("--seed", type=number(int, ge=0), default=0, help="seeds the --folds shuffle")
    add_data_dir(score)
    add_unverified_data(score)
    add_bench_options(score)
    score.set_defaults(handler="agentspec.cli.speculator:on_data", on_data="score_command")


def on_data(args: Any) -> dict[str, Any]:
    """Run ``args.on_data`` of :mod:`agentspec.cli.commands.speculator` on the bench's data (custom data within
    ``--unverified-data``), its JSON line with ``data_verified`` and the files' sha256 where the data is pinned."""
    from agentspec.cli.commands import speculator as command
    from agentspec.cli.commands.data import data_summary
    from agentspec.data import unverified_data

    with unverified_data(args.unverified_data):
        return getattr(command, args.on_data)(args) | data_summary(args)
