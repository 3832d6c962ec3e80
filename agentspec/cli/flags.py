"""Flag helpers shared by every subcommand: bounded numbers, model-role flags, the noisy-oracle speculator.

Every numeric flag is declared with :func:`number`, so every one is checked
once, at parse time, and a bad value gets the same one-line message::

    >>> limit = number(int, ge=1)
    >>> limit("3")
    3
    >>> limit("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1, got '-1'

Kept free of heavy imports: the CLI imports it before any command runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from agentspec.errors import UsageError
from agentspec.runtime.modes import NOISY, noisy_oracle_p

__all__ = ["NOISY", "POSITIVE", "PROBABILITY", "TEMPERATURE", "add_data_dir", "add_role_flags", "noisy_oracle_p",
           "number"]



def _bounds(**limits: float | None) -> str:
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return " and ".join(f"{signs[name]} {value}" for name, value in limits.items() if value is not None)


def number(kind: type[int] | type[float], *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Callable[[str], Any]:
    """An argparse ``type`` parsing ``kind`` (int or float) within the given bounds (finite floats only)."""
    noun = "an integer" if kind is int else "a number"
    bounds = _bounds(ge=ge, gt=gt, le=le, lt=lt)
    wanted = f"{noun} {bounds}".strip()

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        outside = ((ge is not None and value < ge) or (gt is not None and value <= gt)
                   or (le is not None and value > le) or (lt is not None and value >= lt))
        if outside or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


POSITIVE = number(int, ge=1)
PROBABILITY = number(float, ge=0, le=1)
TEMPERATURE = number(float, ge=0)


def add_role_flags(parser: Any, role: str, whose: str, *, also: str = "") -> None:
    """``--ROLE-model`` and ``--ROLE-base-url``, each with a help text that reads as one sentence.

    ``whose`` names the model ("the agent's model"); ``also`` adds a choice
    only this role has (e.g. ``"noisy-oracle:P (with --agent oracle)"``).
    """
    choices = ["an endpoint URL", "URL#MODEL", f"a model name served at --{role}-base-url",
               "a local model name from `agentspec models list` (served for the run)", *([also] if also else [])]
    parser.add_argument(f"--{role}-model", metavar="URL_OR_NAME",
                        help=f"{whose[0].upper()}{whose[1:]}: {', '.join(choices[:-1])}, or {choices[-1]}.")
    parser.add_argument(f"--{role}-base-url", metavar="URL",
                        help=f"OpenAI-compatible base URL serving {whose}, when --{role}-model is a model name.")


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``: where a command finds the benchmark's data."""
    parser.add_argument("--data-dir", help="benchmark data folder (default: $AGENTSPEC_TAU2_DATA or the user cache)")


def add_bench_options(parser: argparse.ArgumentParser) -> None:
    """``--backend`` and ``--bench-option KEY=VALUE`` (repeatable): a bench's environment backend and its own
    settings (AppWorld: ``actions=meta``, ``apps=...``)."""
    parser.add_argument("--backend", choices=["overlay", "copy", "docker", "none"],
                        help="environment backend, for a bench that offers several (workspace-demo: overlay by "
                        "default; gaia: the Python sandbox, docker by default, none for no Python tool)")
    parser.add_argument("--bench-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the bench itself, repeatable (appworld: actions=api|meta|code, "
                        "apps=spotify,venmo)")


def bench_options(pairs: list[str]) -> dict[str, str]:
    """The ``--bench-option`` pairs as a dict; UsageError on one without ``=``."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--bench-option {pair!r}: write KEY=VALUE")
        options[key.strip()] = value.strip()
    return options
