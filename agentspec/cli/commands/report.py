"""``agentspec report``: one HTML page comparing runs (the parser is :mod:`agentspec.cli.report`; the page is
:func:`agentspec.report.command.write_report`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentspec.report.command import write_report


def report_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec report``: the last stdout line names the page and counts its runs and tasks."""
    bench = None
    if args.bench:
        from agentspec.bench.registry import open_bench

        bench = open_bench(args.bench, args.data_dir)
    return write_report([Path(p) for p in args.runs], Path(args.out), bench)
