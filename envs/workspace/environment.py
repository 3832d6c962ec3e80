"""Open a workspace over a sandbox backend: overlay (or copy) forks on this host, or Docker containers.

    async with open_workspace("overlay", source=Path("repo")) as env:
        obs = await env.execute(ToolCall(name="run_shell", arguments={"command": "ls"}))
        box = await env.fork(await env.snapshot())
        await box.execute(ToolCall(name="write_file", arguments={"path": "a.txt", "content": "hi"}))
        await env.commit(box)

The result is a :class:`agentspec.snapshot.SnapshotBackend`, so the executor
runs it in every mode exactly like the in-process tau2 environment.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from agentspec.errors import ConfigError
from agentspec.sandbox.program import SandboxProgram
from agentspec.snapshot import SnapshotBackend
from envs.workspace.tools import WorkspaceTools

OPS_FILE = Path(__file__).with_name("ops.py")

Kind = Literal["overlay", "copy", "docker"]


def workspace_program() -> SandboxProgram:
    """The workspace tools and the ops module that runs them inside a sandbox."""
    return SandboxProgram(toolkit=WorkspaceTools(), ops_file=OPS_FILE)


@functools.cache
def dev_image() -> str:
    """The development sandbox image (``agentspec/sandbox/definitions/dev.toml``), built once or found by its content hash.

    SnapshotError (one line) when no Docker engine answers."""
    from agentspec.sandbox import connect
    from agentspec.sandbox.images import ImageDefinition, build_image, find_definition

    client = connect()
    try:
        return build_image(client, ImageDefinition.load(find_definition("dev"))).tag
    finally:
        client.close()


@asynccontextmanager
async def open_workspace(kind: Kind = "overlay", source: Path | None = None, **options: Any) -> AsyncIterator[SnapshotBackend]:
    """A started workspace backend of ``kind`` seeded from ``source``; closed (and cleaned up) on exit.

    ``options`` go to the backend: ``limits``, ``confinement`` and ``scratch`` for
    overlay/copy; ``image``, ``limits``, ``commit_mode`` and ``client`` for Docker.
    Overlay and copy need bubblewrap (``apt-get install bubblewrap``) and refuse to
    start without it; ``confinement="none"`` runs the tools unconfined, an opt-in
    every observation records (``isolation="unconfined"``).
    """
    program = workspace_program()
    backend: Any
    if kind in ("overlay", "copy"):
        from agentspec.sandbox.overlay import OverlayBackend

        backend = OverlayBackend(program, source, mode=kind, **options)
    elif kind == "docker":
        from agentspec.sandbox.docker_backend import DockerBackend

        backend = DockerBackend(program, source, **options)
    else:
        raise ConfigError(f"unknown workspace backend {kind!r} (overlay, copy or docker)")
    async with backend:
        yield backend
