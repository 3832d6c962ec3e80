"""``agentspec bench setup NAME``: the bench's own setup (the parser is :mod:`agentspec.cli.bench`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from agentspec.bench.protocol import SetUp
from agentspec.bench.registry import names_with, setup_bench
from agentspec.cli.progress import Progress


def setup_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec bench setup NAME``: the bench's own setup (AppWorld's venv); its summary.  Progress lines on
    stderr (the first setup takes minutes, each later one seconds)."""
    # A bench without a setup is refused by setup_bench, in one line: no progress line before it.
    progress = Progress("bench setup", enabled=not args.no_progress and args.bench in names_with(SetUp))
    progress(f"setting up {args.bench} (the first time: its own venv and install, minutes)...")
    started = time.perf_counter()
    summary = setup_bench(args.bench, venv=args.venv)
    progress(f"{args.bench} ready in {time.perf_counter() - started:.1f} s")
    return summary
