"""``agentspec evaluate``: score a given sequence of tool calls (handler: :func:`agentspec.cli.commands.evaluate.evaluate_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_bench, add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``evaluate``."""
    ev = sub.add_parser("evaluate", help="score a given sequence of tool calls for a task")
    add_bench(ev)
    ev.add_argument("--task-id", help="the task to score against")
    ev.add_argument("--actions", help='JSON file: [{"requestor": "assistant"|"user", "name": ..., "arguments": {...}}]')
    ev.add_argument("--end", choices=["agent", "user"], default="agent", help="who stops the episode")
    ev.add_argument("--batch", help='JSON lines file of {"task_id", "actions", "end"} records')
    add_data_dir(ev)
    ev.set_defaults(handler="agentspec.cli.commands.evaluate:evaluate_command")
