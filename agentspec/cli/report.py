"""``agentspec report``: one HTML page comparing runs (handler: :func:`agentspec.cli.commands.report.report_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_bench, add_data_dir, out_file


def add_parser(sub: Any) -> None:
    """Register ``report``."""
    report = sub.add_parser("report", help="one self-contained HTML page comparing runs: where the time went")
    report.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="--out folders of agentspec run (with results.json), or with --bench recorded runs of real "
                        "agents (tau2-bench's simulation files): each shown as one mode, recorded, on its own clock")
    report.add_argument("--out", type=out_file, help="the HTML file to write (its folder is created; default: "
                        "report.html in the first RUN_DIR)")
    add_bench(report, required=False, help="the bench whose recorded runs are among RUN_DIR")
    add_data_dir(report)
    report.set_defaults(handler="agentspec.cli.commands.report:report_command")
