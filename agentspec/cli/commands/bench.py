"""``agentspec bench setup NAME``: the bench's own setup (the parser is :mod:`agentspec.cli.bench`)."""

from __future__ import annotations

import argparse
from typing import Any

from agentspec.bench.registry import setup_bench


def setup_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec bench setup NAME``: the bench's own setup (AppWorld's venv); its summary."""
    return setup_bench(args.name, args)
