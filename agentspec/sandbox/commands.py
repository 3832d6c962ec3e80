"""``agentspec sandbox ...``: build base images, sweep leftovers.

    agentspec sandbox build [NAME_OR_FILE ...] [--force]   # default: dev (envs/sandboxes/dev.toml)
    agentspec sandbox sweep [--all]                        # containers, images and scratch dirs of dead runs
"""

from __future__ import annotations

import argparse
from typing import Any


def add_sandbox_commands(sub: Any) -> None:
    """Register the ``sandbox`` command group (imports nothing heavy until a command runs)."""
    sandbox = sub.add_parser("sandbox", help="sandbox images and cleanup (Docker, overlay)")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    build = sandbox_sub.add_parser("build", help="build base images from definitions (cached by content hash)")
    build.add_argument("names", nargs="*", default=["dev"], help="definition names in envs/sandboxes, or .toml files")
    build.add_argument("--force", action="store_true", help="rebuild even when the image or rootfs is cached")
    build.set_defaults(handler="agentspec.sandbox.commands:build_command")
    sweep = sandbox_sub.add_parser("sweep", help="remove what dead runs left: containers, snapshot images, scratch")
    sweep.add_argument("--all", action="store_true", help="also what live processes own (stop their runs first)")
    sweep.set_defaults(handler="agentspec.sandbox.commands:sweep_command")


def build_command(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import asdict

    from agentspec.sandbox._docker import connect
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
    from agentspec.sandbox import _docker
    from agentspec.sandbox.overlay import default_scratch, sweep_scratch

    result: dict[str, Any] = {"scratch": len(sweep_scratch(default_scratch()))}
    try:
        client = _docker.connect()
    except SnapshotError as exc:
        result["docker"] = f"skipped: {exc}"
        return result
    try:
        with _docker.translated("sweeping"):
            result.update(_docker.sweep(client.api, everything=args.all))
    finally:
        client.close()
    return result
