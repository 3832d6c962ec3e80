"""``agentspec bench setup NAME``: prepare what a bench runs on (handler: :func:`agentspec.cli.commands.bench.setup_command`).

    agentspec bench setup appworld [--venv PATH]
"""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``bench setup``."""
    bench = sub.add_parser("bench", help="set up a benchmark's own engine")
    actions = bench.add_subparsers(dest="bench_command", required=True)
    setup = actions.add_parser("setup", help="make what the bench runs on (appworld: its own venv, `appworld install`); "
                               "idempotent")
    setup.add_argument("name", help="the bench, e.g. appworld")
    setup.add_argument("--venv", help="appworld: where its venv goes (default: $AGENTSPEC_APPWORLD_VENV or "
                       "~/.cache/agentspec/appworld/venv)")
    setup.set_defaults(handler="agentspec.cli.commands.bench:setup_command")
