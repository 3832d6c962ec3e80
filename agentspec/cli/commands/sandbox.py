"""``agentspec sandbox build|sweep``: build base images, sweep leftovers (the parser is :mod:`agentspec.cli.sandbox`).

Docker is imported only when a command runs.

    agentspec sandbox build [NAME_OR_FILE ...] [--force]   # default: dev (agentspec/sandbox/definitions/dev.toml)
    agentspec sandbox sweep [--all]                        # containers, images and scratch dirs of dead runs
"""

from __future__ import annotations

import argparse
from typing import Any


def build_command(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import asdict

    from agentspec.sandbox.containers import connect
    from agentspec.sandbox.images import ImageDefinition, build_image, find_definition

    definitions = [ImageDefinition.load(find_definition(name)) for name in args.names]
    client = connect()
    try:
        built = [{"name": d.name, **asdict(build_image(client, d, force=args.force))} for d in definitions]
    finally:
        client.close()
    return {"images": built}


def sweep_command(args: argparse.Namespace) -> dict[str, Any]:
    from agentspec.errors import SnapshotError
    from agentspec.sandbox import containers
    from agentspec.sandbox.overlay import scratch_bases, sweep_scratch

    # Scratch roots (agentspec-ws-*) of overlay/copy backends and run folders (agentspec-run-*) whose run is gone,
    # wherever runs put them.
    result: dict[str, Any] = {"scratch": sum(len(sweep_scratch(base)) for base in scratch_bases())}
    try:
        client = containers.connect()
    except SnapshotError as exc:
        result["docker"] = f"skipped: {exc}"
        return result
    try:
        with containers.translated("sweeping"):
            result.update(containers.sweep(client.api, everything=args.all))
    finally:
        client.close()
    return result
