"""The command-line reference, ``docs/cli.md``, rendered from the parser itself so that it cannot drift from the code.

    python -m agentspec.cli.reference > docs/cli.md

Every command, from ``agentspec`` down to ``agentspec speculator fit``, gets a heading, its one-line help and its
``--help`` text as argparse prints it.  ``tests/test_readme_example.py`` checks that the file equals
:func:`render`, so a flag added or reworded without regenerating the page fails there, naming the command above.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["REGENERATE", "WIDTH", "commands", "render"]

REGENERATE = "python -m agentspec.cli.reference > docs/cli.md"
WIDTH = 110
"""Help is wrapped at this width, not the terminal's: the page must come out the same on every machine."""


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ("agentspec",),
             summary: str = "") -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command, one-line help, parser)`` for ``parser`` and every subcommand below it, in the order
    ``--help`` lists them (the one-line help is what the parent's listing shows; empty for the top)."""
    yield " ".join(words), summary, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) in seen:  # an alias names the same parser again
                    continue
                seen.add(id(child))
                yield from commands(child, (*words, name), helps.get(name, ""))


@contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps help at ``$COLUMNS`` (else the terminal's width): fix it while rendering."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width + 2)  # argparse keeps two columns of margin
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _anchor(command: str) -> str:
    """The anchor GitHub gives the heading ``## `agentspec run` ``."""
    return command.replace(" ", "-")


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """``docs/cli.md``: every command of ``parser`` (by default :func:`agentspec.cli.build_parser`'s) as markdown."""
    if parser is None:
        from agentspec.cli import build_parser

        parser = build_parser()
    with _columns(WIDTH):
        found = [(command, summary, each.format_help().rstrip()) for command, summary, each in commands(parser)]
    lines = [
        "# Command-line reference",
        "",
        f"<!-- Generated from agentspec.cli.build_parser() by `{REGENERATE}`: edit the parser, not this file. -->",
        "",
        "Every `agentspec` command with its flags, as `agentspec COMMAND --help` prints them. How to use them:",
        "[the README](../README.md) (the two commands and a tour) and [runs.md](runs.md) (what a run prints and "
        "writes, the flags by purpose).",
        "",
    ]
    lines += [f"- [`{command}`](#{_anchor(command)})" + (f": {summary}" if summary else "")
              for command, summary, _ in found]
    for command, summary, text in found:
        lines += ["", f"## `{command}`", ""]
        if summary:
            lines += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
        lines += ["```text", text, "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
