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
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentspec.errors import UsageError
from agentspec.runtime.modes import NOISY, noisy_oracle_p

__all__ = ["NOISY", "POSITIVE", "PROBABILITY", "TEMPERATURE", "BenchNames", "Flags", "HelpFormatter", "add_bench",
           "add_bench_name", "add_data_dir", "add_json", "add_macro_commit", "add_role_flags", "noisy_oracle_p",
           "number", "out_file", "out_folder", "settle_bench_name"]

Flags = argparse._ActionsContainer
"""What a flag helper adds to: a parser or one of its argument groups (``run --help`` shows its flags in groups)."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with ``(default: X)`` after each flag whose default says something: a value, not None,
    False, empty or a switch's, and not where the help already speaks of its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        takes_value = action.nargs != 0 or isinstance(action, argparse.BooleanOptionalAction)
        optional = bool(action.option_strings) or action.nargs in ("?", "*")
        if (default is None or default is False or default is argparse.SUPPRESS or default in ("", [])
                or not takes_value or not optional or text == argparse.SUPPRESS or "default" in text.lower()):
            return action.help
        shown = ", ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
        # argparse %-formats the help (%(prog)s...): a literal % in the value must survive it.
        return f"{text} (default: {shown.replace('%', '%%')})".lstrip()


def add_json(parser: Flags, help: str = "print the result as one JSON line (what scripts read)") -> None:
    """``--json``: the command's result as one JSON line on stdout.  Given after the subcommand it is this flag;
    before it, the top-level parser's (whose default stays, as SUPPRESS leaves the namespace alone)."""
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=help)


class BenchNames:
    """The registered benches (those with ``feature``, a protocol of :mod:`agentspec.bench.protocol`, if given),
    read when a help is shown: building the parser must not read the registry (``agentspec --help`` loads no
    bench)."""

    def __init__(self, feature: str | None = None) -> None:
        self.feature = feature

    def __str__(self) -> str:
        from agentspec.bench import protocol, registry

        if self.feature is None:
            return ", ".join(registry.bench_names())
        return ", ".join(registry.names_with(getattr(protocol, self.feature)))


def _listing(action: argparse.Action, feature: str | None) -> None:
    # argparse fills "%(benches)s" in the help from the action's attributes, as it does "%(default)s".
    action.benches = BenchNames(feature)  # type: ignore[attr-defined]


def add_bench(parser: Flags, *, required: bool = True, help: str = "the benchmark") -> None:
    """``--bench NAME``, its help listing the registered benches (an unknown one is refused by the registry, with
    the same list)."""
    _listing(parser.add_argument("--bench", required=required, metavar="NAME", help=f"{help}: %(benches)s"), None)


def add_bench_name(parser: Flags, feature: str, help: str) -> None:
    """The bench as a positional ``BENCH`` (what old scripts pass) or as ``--bench NAME`` (as every other command
    takes it), one of those whose class has ``feature`` (``PinnedData``, ``SetUp``); :func:`settle_bench_name` makes them one ``args.bench``."""
    _listing(parser.add_argument("bench_name", nargs="?", metavar="BENCH", help=f"{help}: %(benches)s (or --bench)"),
             feature)
    _listing(parser.add_argument("--bench", dest="bench_flag", metavar="NAME", help=f"{help}: %(benches)s"), feature)


def settle_bench_name(args: argparse.Namespace) -> None:
    """``args.bench`` from the positional ``BENCH`` or ``--bench`` of :func:`add_bench_name` (no-op elsewhere);
    a :class:`UsageError` line when both or neither are given."""
    if not hasattr(args, "bench_flag"):
        return
    given = [name for name in (args.bench_name, args.bench_flag) if name is not None]
    if len(given) != 1:
        raise UsageError(f"{'name the bench once' if given else 'name the bench'}: "
                         f"agentspec {_command(args)} --bench NAME (or agentspec {_command(args)} NAME)")
    args.bench = given[0]
    del args.bench_name, args.bench_flag


def _command(args: argparse.Namespace) -> str:
    return " ".join(part for part in (args.command, getattr(args, f"{args.command}_command", None)) if part)



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


class _FirstAndMore(argparse.Action):
    """A repeatable flag: its first value in ``dest``, any further ones in ``more_<dest without _model>s``."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        more = f"more_{self.dest.removesuffix('_model')}s"
        if getattr(namespace, self.dest, None) is None:
            setattr(namespace, self.dest, values)
            setattr(namespace, more, [])
        else:
            setattr(namespace, more, [*(getattr(namespace, more, None) or []), values])


def add_role_flags(parser: Any, role: str, whose: str, *, also: str | Sequence[str] = (), repeatable: bool = False) -> None:
    """``--ROLE-model`` and ``--ROLE-base-url``, each with a help text that reads as one sentence.

    ``whose`` names the model ("the agent's model"); ``also`` adds the choices
    only this role has (e.g. ``"noisy-oracle:P (with --agent oracle)"``); ``repeatable``: ``--ROLE-model`` may be
    given again, each further value landing in ``more_<role>s`` (several speculators, asked in turn).
    """
    extra = [choice for choice in ([also] if isinstance(also, str) else also) if choice]
    choices = ["an endpoint URL", "URL#MODEL", f"a model name served at --{role}-base-url",
               "a local model name from `agentspec models list` (served for the run)", *extra]
    # One sentence (the help test reads it so): the repeat clause joins it after a semicolon.
    again = "; give the flag again to add more, each asked where the ones before abstain" if repeatable else ""
    parser.add_argument(f"--{role}-model", metavar="URL_OR_NAME", **({"action": _FirstAndMore} if repeatable else {}),
                        help=f"{whose[0].upper()}{whose[1:]}: {', '.join(choices[:-1])}, or {choices[-1]}{again}.")
    parser.add_argument(f"--{role}-base-url", metavar="URL",
                        help=f"OpenAI-compatible base URL serving {whose}, when --{role}-model is a model name.")


def add_macro_commit(parser: Any) -> None:
    """``--macro-commit verified|trusted``: how smc commits a fired macro's pre-executed chain."""
    parser.add_argument("--macro-commit", choices=["verified", "trusted"], default="verified",
                        help="smc: verified (default) commits only the prefix of a macro's pre-executed chain that the "
                        "authority verifies as its own calls, lossless; trusted commits the whole chain unasked (the "
                        "SMC paper's lossy commit, also what verified falls back to where the authority cannot verify, "
                        "as the summary's macro_commit says)")


def add_data_dir(parser: Flags) -> None:
    """``--data-dir``: where a command finds the benchmark's data."""
    parser.add_argument("--data-dir", help="benchmark data folder (default: $AGENTSPEC_TAU2_DATA or the user cache)")


def add_unverified_data(parser: Flags) -> None:
    """``--unverified-data``: run data that fails its hash check (custom tasks, edited databases); the command
    then wraps its work in :func:`agentspec.data.unverified_data` and reports :func:`agentspec.data.data_report`."""
    parser.add_argument("--unverified-data", action="store_true",
                        help="use a --data-dir that is not the pinned release (new tasks, edited databases): one "
                        "warning, and data_verified false with the files' sha256 in the summary")


def add_bench_options(parser: Flags) -> None:
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


def _writable(folder: Path) -> None:
    """Create ``folder`` (and its parents) and write a file in it; ArgumentTypeError with the reason otherwise."""
    for parent in (folder, *folder.parents):
        if parent.exists() and not parent.is_dir():
            where = f"{folder}: {parent}" if parent != folder else str(folder)  # the path once when it is the file
            raise argparse.ArgumentTypeError(f"{where} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".agentspec-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write in {folder}: {exc.strerror or exc}") from None


def out_folder(text: str) -> str:
    """An argparse ``type`` for a folder a command writes into: created now and proven writable, so an unusable
    one (``/proc/x``, read-only, a file in the way) is a one-line usage error before anything runs."""
    _writable(Path(text))
    return text


def out_file(text: str) -> str:
    """An argparse ``type`` for a file a command writes: not a folder, and its folder made as :func:`out_folder`
    makes one (the file itself is written later)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name, e.g. {path / 'out'}")
    _writable(path.parent)
    return text
