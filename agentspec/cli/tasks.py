"""``agentspec tasks``: list a benchmark's task ids (handler: :func:`agentspec.cli.commands.tasks.tasks_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``tasks``."""
    tasks = sub.add_parser("tasks", help="list a benchmark's task ids (what evaluate --task-id takes)")
    tasks.add_argument("--bench", required=True, help="benchmark name, e.g. tau2-telecom")
    tasks.add_argument("--split", help="task split (default: the bench's own, tau2: base)")
    tasks.add_argument("--json", action="store_true", help="print the ids as one JSON list instead of one per line")
    add_data_dir(tasks)
    tasks.set_defaults(handler="agentspec.cli.commands.tasks:tasks_command")
