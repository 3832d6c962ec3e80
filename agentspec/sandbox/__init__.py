"""Real sandboxes for speculative tool execution: overlay/copy filesystems, Docker containers, SQLite.

Every backend implements :class:`agentspec.snapshot.SnapshotBackend` as a
strategy of :class:`agentspec.snapshot.LineageBackend`, which keeps tokens,
lineage, stale checks, locks and discards once; a backend here adds only its
mechanism (how a state is frozen, forked, run in, promoted and dropped) and
its isolation (:mod:`agentspec.sandbox.program` holds what the overlay, copy
and Docker backends share: planning a call, its deadline, the isolation label)::

    from agentspec.sandbox import OverlayBackend, DockerBackend, SqliteBackend

Backends are imported lazily (the Docker SDK only when Docker is used).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "DockerBackend": "agentspec.sandbox.docker_backend",
    "DockerSandbox": "agentspec.sandbox.docker_backend",
    "ImageDefinition": "agentspec.sandbox.images",
    "Limits": "agentspec.sandbox.program",
    "Op": "agentspec.sandbox.program",
    "OverlayBackend": "agentspec.sandbox.overlay",
    "OverlaySandbox": "agentspec.sandbox.overlay",
    "SandboxProgram": "agentspec.sandbox.program",
    "SqliteBackend": "agentspec.sandbox.sqlite_backend",
    "SqliteSandbox": "agentspec.sandbox.sqlite_backend",
    "SqliteTools": "agentspec.sandbox.sqlite_backend",
    "build_image": "agentspec.sandbox.images",
    "connect": "agentspec.sandbox.containers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'agentspec.sandbox' has no attribute {name!r}")
    return getattr(import_module(_LAZY[name]), name)
