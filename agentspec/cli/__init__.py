"""The ``agentspec`` command line.

    agentspec run --bench tau2-telecom --split base --agent oracle --data-dir DIR --out DIR
    agentspec run --bench tau2-telecom --split small --agent-model URL_OR_NAME --user-model URL_OR_NAME
    agentspec evaluate --bench tau2-telecom --task-id ID --actions FILE.json [--end agent|user]
    agentspec score --bench gaia --answers FILE.jsonl --data-dir DIR
    agentspec tasks --bench tau2-telecom [--split S] [--json]
    agentspec data pull tau2-telecom [--from-checkout DIR | --wheel FILE]
    agentspec report RUN_DIR [RUN_DIR ...] --out FILE.html
    agentspec bench setup appworld

Every command prints its result as JSON on the last stdout line, except where a
person reads it better otherwise: ``run`` prints a table of its modes and where
its results are, ``tasks`` one id per line.  ``--json`` (after the subcommand or
before it) gives the JSON line everywhere.  User mistakes (bad flags, files,
ids, dead endpoints) exit with code 2 and a one-line message on stderr, never
a traceback: argparse's own errors included.

One module per command builds its parser (:mod:`.run`, :mod:`.mine`, ...), sharing the flag helpers of
:mod:`.flags`; none imports more than argparse, so ``agentspec --help`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from agentspec.cli import (
    bench,
    data,
    evaluate,
    mcp_proxy,
    mine,
    models,
    report,
    run,
    sandbox,
    score,
    serve,
    speculator,
    tasks,
)
from agentspec.cli.flags import HelpFormatter, add_json, settle_bench_name
from agentspec.errors import AgentSpecError, UsageError

__all__ = ["COMMAND_GROUPS", "EXIT_USAGE", "build_parser", "main"]

EXIT_USAGE = 2

# One module per command, each adding its subcommand; a subcommand names its handler as "module:function"
# (imported only when that command runs, so startup stays light), taking the parsed args and returning the JSON summary.
COMMAND_GROUPS: list[Callable[[Any], None]] = [module.add_parser for module in (run, evaluate, score, tasks, data, models,
                                                                                  serve, sandbox, mine, report, bench, speculator, mcp_proxy)]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a :class:`UsageError` (one line, exit 2) like every other user mistake."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """The parsed flags, with what argparse cannot say alone settled: the bench, positional or ``--bench``."""
        parsed = super().parse_args(args, namespace)
        settle_bench_name(parsed)
        return parsed


def build_parser() -> argparse.ArgumentParser:
    """The ``agentspec`` parser with every subcommand (what :func:`main` parses)."""
    parser = _Parser(prog="agentspec", description="Fast, faithful tool-using agents.")
    parser.add_argument("--version", action="version", version=f"agentspec {_version()}")
    parser.add_argument("--json", action="store_true", help="print every result as one JSON line (what scripts "
                        "read), as the subcommand's own --json does")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    for each in _parsers(parser):  # the habits every command shares, set in one place
        each.formatter_class = HelpFormatter
        if "--json" not in each._option_string_actions:
            add_json(each)
    return parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser below it, each once."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias names the same parser again
                yield from _parsers(child)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentspec")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(source tree)"


def _dispatch(args: argparse.Namespace) -> dict[str, Any] | list[Any] | None:
    module, _, function = args.handler.partition(":")
    return getattr(importlib.import_module(module), function)(args)


def _show(args: argparse.Namespace, summary: dict[str, Any] | list[Any]) -> None:
    """The result on stdout: the command's table for a person where it has one (``table``: "module:function",
    imported only now: rich is heavy), else, or with ``--json``, one JSON line."""
    table = getattr(args, "table", None)
    if table and not args.json and isinstance(summary, dict):
        module, _, function = table.partition(":")
        getattr(importlib.import_module(module), function)(summary)
    else:
        print(json.dumps(summary), flush=True)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (2 for a user mistake, with a one-line message on stderr)."""
    try:
        args = build_parser().parse_args(argv)
        summary = _dispatch(args)
    except AgentSpecError as exc:
        print(f"agentspec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseExceptionGroup as group:
        # A task group re-raises a user-facing error wrapped in a group; unwrap it when that is all there is.
        if group.split(KeyboardInterrupt)[0] is not None:
            return _interrupted()  # Ctrl-C inside a task group (a --mode run): the same one line
        ours, rest = group.split(AgentSpecError)
        if ours is None or rest is not None:
            raise
        print(f"agentspec: error: {_first_leaf(ours)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:
        return _closed_pipe()
    if summary is not None:
        try:
            _show(args, summary)
        except BrokenPipeError:
            return _closed_pipe()
    return 0


EXIT_INTERRUPTED = 130
EXIT_CLOSED_PIPE = 141
"""128 + SIGPIPE, as a shell reports a command whose reader went away (``agentspec tasks ... | head -1``)."""


def _interrupted() -> int:
    print("agentspec: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _closed_pipe() -> int:
    """The reader of stdout went away: stop quietly (stdout is pointed at /dev/null so that the interpreter's last
    flush does not complain about it either)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE
