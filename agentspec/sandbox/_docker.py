"""The Docker seam: connecting to the engine, translating its errors, labels, and the sweep of leftovers.

The engine is found through ``DOCKER_HOST`` (and the other ``DOCKER_*``
variables), else the default socket.  Every container and image a backend
makes carries :data:`LABEL` and :data:`OWNER` labels; :func:`sweep` removes
those whose owning process on this host is gone (a crash, a ``kill -9``).
Docker SDK and transport errors become :class:`~agentspec.errors.SnapshotError`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import docker
import docker.errors
import requests

from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox._owner import owner_dead

LABEL = "agentspec.sandbox"
"""On every container and snapshot image a backend makes (value ``"1"``)."""
OWNER = "agentspec.owner"
"""``host:pid:start`` of the process that made it."""
BACKEND = "agentspec.backend"
"""The id of the backend instance that made it."""
IMAGE = "agentspec.image"
"""On base images built by ``agentspec sandbox build``: the definition's name (never swept)."""
MOUNTS = "agentspec.mounts"
"""On base images that need host directories bind-mounted: ``/usr:/usr:ro[,...]``."""

T = TypeVar("T")


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn Docker SDK and transport errors into :class:`SnapshotError`."""
    try:
        yield
    except docker.errors.DockerException as exc:
        raise SnapshotError(f"{what}: {exc}") from exc
    except requests.exceptions.RequestException as exc:
        raise SnapshotError(f"{what}: {exc}") from exc


async def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking SDK call in a worker thread, with errors translated."""

    def run() -> T:
        with translated(what):
            return fn(*args, **kwargs)

    return await anyio.to_thread.run_sync(run)


def connect(timeout: int = 120) -> docker.DockerClient:
    """A client for the engine at ``DOCKER_HOST`` (or the default socket); SnapshotError if none answers."""
    try:
        client = docker.from_env(timeout=timeout)
    except docker.errors.DockerException as exc:
        raise SnapshotError(f"no Docker engine reachable: {exc}") from exc
    try:
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        client.close()
        raise SnapshotError(f"no Docker engine reachable at {client.api.base_url}: {exc}") from exc
    return client


DISK_HINT = (
    "run dockerd with its data root on btrfs, or on xfs mounted with pquota (overlay2), as .ci/run does; "
    "or pass Limits(disk_bytes=None) to run without a disk limit (reported in every result)"
)


def is_disk_limit_refusal(exc: BaseException) -> bool:
    """Whether the engine refused a container because it cannot apply ``--storage-opt size``."""
    return "storage-opt" in str(exc).lower() or "storage opt" in str(exc).lower()


def disk_limit_error(exc: BaseException) -> SnapshotError:
    return SnapshotError(f"this Docker engine cannot cap a container's disk ({exc}): {DISK_HINT}")


def check_disk_limit(api: docker.APIClient, image: str, size: int = 64 * 2**20) -> None:
    """SnapshotError unless the engine caps a container's writable layer (``--storage-opt size``). Blocking."""
    host = api.create_host_config(network_mode="none", storage_opt={"size": str(size)})
    try:
        container = api.create_container(image, command=["true"], host_config=host)
    except docker.errors.APIError as exc:
        if is_disk_limit_refusal(exc):
            raise disk_limit_error(exc) from exc
        raise SnapshotError(f"checking the disk limit: {exc}") from exc
    api.remove_container(container["Id"], force=True)


def check_user(user: str, image: str) -> str:
    """``user`` unless it is root: sandboxes never run tools as root (ConfigError)."""
    if user.split(":")[0] in ("root", "0"):
        raise ConfigError(f"image {image} runs as root (USER {user}); sandboxes run tools as an unprivileged user")
    return user


def parse_mounts(spec: str | None) -> dict[str, dict[str, str]]:
    """``"/usr:/usr:ro,/x:/y"`` -> the SDK's ``volumes`` mapping."""
    volumes: dict[str, dict[str, str]] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        host, inside, mode = parts[0], parts[1] if len(parts) > 1 else parts[0], parts[2] if len(parts) > 2 else "rw"
        volumes[host] = {"bind": inside, "mode": mode}
    return volumes


def remove_images(api: docker.APIClient, ids: list[str]) -> list[str]:
    """Remove images, children before parents; returns the ids that could not be removed (still in use)."""
    pending = list(dict.fromkeys(ids))
    while pending:
        left = []
        for image_id in pending:
            try:
                api.remove_image(image_id, force=False, noprune=False)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                left.append(image_id)  # a child image or a container still uses it
        if len(left) == len(pending):
            return left
        pending = left
    return []


def sweep(api: docker.APIClient, everything: bool = False) -> dict[str, int]:
    """Remove containers and snapshot images left by dead processes (``everything``: by any process).

    Blocking; base images (no owner label) are never touched.
    """
    containers = 0
    for info in api.containers(all=True, filters={"label": LABEL}):
        owner = (info.get("Labels") or {}).get(OWNER, "")
        if everything or owner_dead(owner):
            try:
                api.remove_container(info["Id"], force=True)
                containers += 1
            except docker.errors.NotFound:
                pass
    doomed = []
    for info in api.images(all=True, filters={"label": OWNER}):
        owner = (info.get("Labels") or {}).get(OWNER, "")
        if everything or owner_dead(owner):
            doomed.append(info["Id"])
    # Newest first: a snapshot's children were committed after it.
    created = {info["Id"]: info.get("Created", 0) for info in api.images(all=True, filters={"label": OWNER})}
    doomed.sort(key=lambda image_id: created.get(image_id, 0), reverse=True)
    left = remove_images(api, doomed)
    if left:
        print(f"agentspec: {len(left)} sandbox image(s) still in use, kept", file=sys.stderr)
    return {"containers": containers, "images": len(doomed) - len(left)}
