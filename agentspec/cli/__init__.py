"""The ``agentspec`` command line.

    agentspec run --bench tau2-telecom --split base --agent oracle --data-dir DIR --out DIR
    agentspec run --bench tau2-telecom --split small --agent-model URL_OR_NAME --user-model URL_OR_NAME
    agentspec evaluate --bench tau2-telecom --task-id ID --actions FILE.json [--end agent|user]
    agentspec score --bench gaia --answers FILE.jsonl --data-dir DIR
    agentspec tasks --bench tau2-telecom [--split S] [--json]
    agentspec data pull tau2-telecom [--from-checkout DIR | --wheel FILE]
    agentspec report RUN_DIR [RUN_DIR ...] --out FILE.html
    agentspec bench setup appworld

Every command prints its result as JSON on the last stdout line (``tasks``
without ``--json`` prints one id per line).  User mistakes (bad flags, files,
ids, dead endpoints) exit with code 2 and a one-line message on stderr, never
a traceback: argparse's own errors included.

One module per command builds its parser (:mod:`.run`, :mod:`.mine`, ...), sharing the flag helpers of
:mod:`.flags`; none imports more than argparse, so ``agentspec --help`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agentspec.cli import bench, data, evaluate, mine, models, report, run, sandbox, score, serve, speculator, tasks
from agentspec.errors import AgentSpecError, UsageError

__all__ = ["COMMAND_GROUPS", "EXIT_USAGE", "build_parser", "main"]

EXIT_USAGE = 2

# One module per command, each adding its subcommand; a subcommand names its handler as "module:function"
# (imported only when that command runs, so startup stays light), taking the parsed args and returning the JSON summary.
COMMAND_GROUPS: list[Callable[[Any], None]] = [module.add_parser for module in (run, evaluate, score, tasks, data, models,
                                                                                  serve, sandbox, mine, report, bench, speculator)]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a :class:`UsageError` (one line, exit 2) like every other user mistake."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``agentspec`` parser with every subcommand (what :func:`main` parses)."""
    parser = _Parser(prog="agentspec", description="Fast, faithful tool-using agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    return parser


def _dispatch(args: argparse.Namespace) -> dict[str, Any] | list[Any] | None:
    module, _, function = args.handler.partition(":")
    return getattr(importlib.import_module(module), function)(args)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (2 for a user mistake, with a one-line message on stderr)."""
    try:
        summary = _dispatch(build_parser().parse_args(argv))
    except AgentSpecError as exc:
        print(f"agentspec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseExceptionGroup as group:
        # A task group re-raises a user-facing error wrapped in a group; unwrap it when that is all there is.
        ours, rest = group.split(AgentSpecError)
        if ours is None or rest is not None:
            raise
        print(f"agentspec: error: {_first_leaf(ours)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("agentspec: interrupted", file=sys.stderr)
        return 130
    if summary is not None:
        print(json.dumps(summary))
    return 0
