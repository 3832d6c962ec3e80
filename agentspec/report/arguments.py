"""The ``agentspec report`` subcommand's arguments (imported by the CLI at start-up, so kept light)."""

from __future__ import annotations

from typing import Any


def add_report_command(sub: Any) -> None:
    """Register ``agentspec report`` (a :data:`agentspec.cli.COMMAND_GROUPS` entry)."""
    report = sub.add_parser("report", help="one self-contained HTML page comparing runs: where the time went")
    report.add_argument("runs", nargs="+", metavar="RUN_DIR", help="--out folders of agentspec run (with results.json)")
    report.add_argument("--out", required=True, help="the HTML file to write (its folder is created)")
    report.set_defaults(handler="agentspec.report.command:report_command")
