"""``agentspec report``: one HTML page comparing runs (the parser is :mod:`agentspec.cli.report`; the page is
:func:`agentspec.report.command.write_report`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.report.command import write_report
from agentspec.results import RESULTS_FILE


def report_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec report``: the last stdout line names the page and counts its runs and tasks."""
    bench = None
    if args.bench:
        from agentspec.bench.registry import open_bench

        bench = open_bench(args.bench, args.data_dir)
    out = Path(args.out) if args.out else default_page(Path(args.runs[0]))
    return write_report([Path(p) for p in args.runs], out, bench)


def default_page(first: Path) -> Path:
    """Where the page goes without ``--out``: ``report.html`` in the first run's folder (beside its results.json,
    as ``run --report`` puts it); a recorded run's file is someone's data, not a folder to write in."""
    if first.is_dir() or not first.exists():  # a missing one is refused, naming it, when the runs are read
        return first / "report.html"
    if first.name == RESULTS_FILE:
        return first.parent / "report.html"
    raise ConfigError(f"{first} is a recorded run, not a run folder: give --out FILE.html for the page")
