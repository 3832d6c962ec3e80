"""``agentspec bench setup NAME``: prepare what a bench runs on (handler: :func:`agentspec.cli.commands.bench.setup_command`).

    agentspec bench setup appworld [--venv PATH]
"""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_bench_name


def add_parser(sub: Any) -> None:
    """Register ``bench setup``."""
    bench = sub.add_parser("bench", help="set up a benchmark's own engine")
    actions = bench.add_subparsers(dest="bench_command", required=True)
    setup = actions.add_parser("setup", help="make what the bench runs on (appworld: its own venv, `appworld install`); "
                               "idempotent")
    add_bench_name(setup, "SetUp", "the bench to set up")
    setup.add_argument("--venv", help="appworld: where its venv goes (default: $AGENTSPEC_APPWORLD_VENV or "
                       "~/.cache/agentspec/appworld/venv)")
    setup.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    setup.set_defaults(handler="agentspec.cli.commands.bench:setup_command")
