"""``agentspec tasks``: list a benchmark's task ids (handler: :func:`agentspec.cli.commands.tasks.tasks_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_bench, add_data_dir, add_json


def add_parser(sub: Any) -> None:
    """Register ``tasks``."""
    tasks = sub.add_parser("tasks", help="list a benchmark's task ids (what evaluate --task-id takes)")
    add_bench(tasks)
    tasks.add_argument("--split", help="task split (default: the bench's own, tau2: base)")
    add_json(tasks, help="print the ids as one JSON list instead of one per line")
    add_data_dir(tasks)
    tasks.set_defaults(handler="agentspec.cli.commands.tasks:tasks_command")
