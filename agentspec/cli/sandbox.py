"""``agentspec sandbox build|sweep``: base images and cleanup (handlers in :mod:`agentspec.cli.commands.sandbox`).

    agentspec sandbox build [NAME_OR_FILE ...] [--force]   # default: dev (agentspec/sandbox/definitions/dev.toml)
    agentspec sandbox sweep [--all]                        # containers, images and scratch dirs of dead runs
"""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``sandbox`` command group (docker is imported only when a command runs)."""
    sandbox = sub.add_parser("sandbox", help="sandbox images and cleanup (Docker, overlay)")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    build = sandbox_sub.add_parser("build", help="build base images from definitions (cached by content hash)")
    build.add_argument("names", nargs="*", default=["dev"], help="definition names in agentspec/sandbox/definitions, or .toml files")
    build.add_argument("--force", action="store_true", help="rebuild even when the image or rootfs is cached")
    build.set_defaults(handler="agentspec.cli.commands.sandbox:build_command")
    sweep = sandbox_sub.add_parser("sweep", help="remove what dead runs left: containers, snapshot images, scratch")
    sweep.add_argument("--all", action="store_true", help="also what live processes own (stop their runs first)")
    sweep.set_defaults(handler="agentspec.cli.commands.sandbox:sweep_command")
