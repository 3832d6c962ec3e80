"""The Docker seam: connecting to the engine, translating its errors, labels, and the sweep of leftovers.

The engine is found through ``DOCKER_HOST`` (and the other ``DOCKER_*``
variables), else the default socket.  Every container and image a backend
makes carries :data:`LABEL` and :data:`OWNER` labels; :func:`sweep` removes
those whose owning process on this host is gone (a crash, a ``kill -9``).
Docker SDK and transport errors become :class:`~agentspec.errors.SnapshotError`.

The Docker backend, the image builder, ``agentspec sandbox`` and the MCP
server in a container (:mod:`agentspec.mcp_docker`) all reach Docker through here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import anyio
import docker
import docker.errors
import requests

from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox.owner import owner_dead

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
    "the Docker backend caps a container's disk with --storage-opt size (btrfs, zfs, overlay2 on xfs with pquota) "
    "or else with a read-only root and a size-limited tmpfs /workspace, which this engine refused too; "
    "or pass Limits(disk_bytes=None) to run without a disk limit (reported in every result)"
)

DiskCap = Literal["storage-opt", "tmpfs"]
"""How a container's disk is capped: ``storage-opt`` (a quota on its writable layer: btrfs, zfs, overlay2 on xfs
with ``pquota``) or ``tmpfs`` (a read-only root, the workspace on a size-limited tmpfs: any engine, overlay2 on
ext4 included)."""

_CAPS: dict[str, DiskCap] = {}
"""What :func:`disk_cap` found, per engine (its URL): probing costs a container create and removal."""


def is_disk_limit_refusal(exc: BaseException) -> bool:
    """Whether the engine refused a container because it cannot apply ``--storage-opt size``."""
    return "storage-opt" in str(exc).lower() or "storage opt" in str(exc).lower()


def disk_limit_error(exc: BaseException | str) -> SnapshotError:
    return SnapshotError(f"this Docker engine cannot cap a container's disk ({exc}): {DISK_HINT}")


def _probe(api: docker.APIClient, image: str, **host: Any) -> None:
    """Create (never start) and remove a container with ``host`` options; APIError or SnapshotError if refused."""
    container = api.create_container(image, command=["true"], host_config=api.create_host_config(**host))
    try:
        if container.get("Warnings"):  # an option the engine would drop: as good as refused
            raise SnapshotError(f"the engine would not apply {sorted(host)}: {container['Warnings']}")
    finally:
        api.remove_container(container["Id"], force=True)


def disk_cap(api: docker.APIClient, image: str, size: int = 64 * 2**20) -> DiskCap:
    """The disk cap this engine can enforce (see :data:`DiskCap`), preferring ``storage-opt``; SnapshotError when
    it can enforce neither.  Blocking; remembered per engine."""
    # By the engine's own identity: every unix socket has the same base_url, and two engines may serve one process.
    info = api.info()
    key = f"{api.base_url}|{info.get('ID')}|{info.get('DockerRootDir')}|{info.get('Driver')}"
    if key in _CAPS:
        return _CAPS[key]
    try:
        _probe(api, image, network_mode="none", storage_opt={"size": str(size)})
        cap: DiskCap = "storage-opt"
    except docker.errors.APIError as exc:
        if not is_disk_limit_refusal(exc):
            raise SnapshotError(f"checking the disk limit: {exc}") from exc
        try:
            _probe(api, image, network_mode="none", read_only=True, tmpfs={"/workspace": f"size={size}"})
        except (docker.errors.APIError, SnapshotError) as tmpfs_exc:
            raise disk_limit_error(f"{exc}; and a tmpfs workspace: {tmpfs_exc}") from tmpfs_exc
        cap = "tmpfs"
    _CAPS[key] = cap
    return cap


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
