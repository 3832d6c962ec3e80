"""``agentspec tasks``: a bench's task ids (the parser is :mod:`agentspec.cli.tasks`)."""

from __future__ import annotations

import argparse

from agentspec.bench.registry import open_bench


def tasks_command(args: argparse.Namespace) -> list[str] | None:
    """``agentspec tasks``: the split's task ids, one per line, or (``--json``) one JSON list as the last line."""
    bench = open_bench(args.bench, args.data_dir)
    ids = [task.id for task in bench.tasks(args.split or bench.default_split)]
    if args.json:
        return ids
    for task_id in ids:
        print(task_id)
    return None
