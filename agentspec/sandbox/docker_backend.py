"""Docker sandboxes: snapshot = commit of a container, fork = a container run from that image.

::

    live     = a container of the base image (the program's runner in /opt/agentspec, the source in /workspace)
    snapshot = ``docker commit`` of the live container, without pausing (no call runs while we hold
               its lock and no process outlives a call); reused while live does not change
    fork     = a new container from the snapshot image
    execute  = ``docker exec`` of the runner with the request on stdin; cancelling kills it for real
    commit   = ``promote`` (default): the fork's container becomes live, the old one is removed; or
               ``diff``: the fork's changed paths are packed and applied to the live container
    discard  = remove the container; a snapshot image goes when no snapshot or container needs it

That is the whole mechanism: tokens, lineage, stale checks, locks, discards
and call deadlines come from :class:`agentspec.snapshot.LineageBackend`.

Every container runs with ``network_mode="none"``, a non-root user (an image
whose ``USER`` is root is refused), all capabilities dropped,
``no-new-privileges``, the engine's default seccomp profile and a tmpfs
``/tmp`` (``tmp_size``, counted in the memory cgroup).  Limits (each enforced,
or the backend refuses to start; ``None`` turns one off, reported by
:attr:`DockerBackend.isolation` and in every observation):

- ``memory_bytes``: the container's memory cgroup, swap included (no swap);
- ``pids``: the container's pids cgroup; ``cpus`` (off by default): a CPU quota;
- ``disk_bytes`` (1 GiB by default), RLIMIT_FSIZE for each file and, for the whole, the first
  cap the engine supports (probed at start, :func:`agentspec.sandbox.containers.disk_cap`):

  ``storage-opt`` (btrfs, zfs, overlay2 on xfs with ``pquota``): ``--storage-opt size``
  caps each container's writable layer.  btrfs charges its quota lazily to
  some containers, so after every writing call the backend also measures the
  writable layer (``SizeRw``): a call that leaves it over the limit fails with an
  error observation, as does every later writing call.

  ``tmpfs`` (any engine: overlay2 on ext4, the common default, cannot do the first): the
  root file system is read-only and ``/workspace`` a tmpfs of ``disk_bytes`` (the kernel
  refuses writes past it: ENOSPC).  ``docker commit`` does not see a tmpfs, so there a
  snapshot is a tar of ``/workspace`` in a host file (the image stays the seed), a fork
  unpacks it into its new container, and a diff commit replaces live's workspace with the
  fork's.  Its pages count in the container's memory cgroup (``memory_bytes``), as ``/tmp``'s do.

  Only where neither works does the backend refuse, with a message saying so;
- an option the engine accepts only with a warning (a limit it would drop) is
  refused too.  PID 1 is the runner in ``--init`` mode: it reaps orphans and, being
PID 1, survives the kill(-1) that ends every call.  Containers and images carry
owner labels; starting a backend sweeps what dead processes left behind, and
:meth:`DockerBackend.close` removes everything this backend made.

Each commit of a promoted fork stacks one more image layer; past
``max_layers`` a snapshot flattens the container (export + import, costs the
tree size) instead of committing it, since overlay2 refuses deeper stacks.

Why promotion is the default (``experiments/sandbox_cost.py``, 1/50/500 MB
trees, medians on a loaded 2-core machine): a promoted commit costs one
container removal, 139-172 ms whatever the tree or change size (10 MB changed:
137-182 ms); a diff commit packs and applies the changed paths, 244-593 ms, and
438-785 ms for a 10 MB change.  Diff commits also leave every committed change
in the live container's writable layer, which ``docker commit`` copies again at
each snapshot of live, so their snapshots grow with the history; promotion's
only growing cost is the layer count, reset by a flatten every ``max_layers``
commits.  The workspace source is baked into a seed image at start for the
same reason (a source left in the live container would be re-copied by every
snapshot).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import secrets
import socket
import tarfile
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import docker
import docker.errors
from docker.types import Ulimit
from docker.utils.socket import STDOUT, frames_iter

from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox import containers
from agentspec.sandbox.containers import BACKEND, LABEL, MOUNTS, OWNER
from agentspec.sandbox.owner import owner_tag
from agentspec.sandbox.program import (
    RUNNER_FILE,
    SANDBOX_DIR,
    WORKSPACE,
    Limits,
    Op,
    ProgramCalls,
    SandboxProgram,
    runner_observation,
)
from agentspec.snapshot import Branch, LineageBackend, error_observation
from agentspec.types import Effect, Observation, Requestor, ToolCall

CommitMode = Literal["promote", "diff"]
DiskCapChoice = Literal["auto", "storage-opt", "tmpfs"]
RUNNER = ["python3", "-I", "-S", f"{SANDBOX_DIR}/runner.py"]
KILL_ALL = ["python3", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"]
_IGNORED_CHANGES = ("/tmp", "/proc", "/sys", "/dev")
# A tmpfs workspace travels as a tar made and unpacked inside the containers (the engine's archive API reads the
# container's root, under the tmpfs).  Both run as the sandbox user in /workspace.
# The packer refuses a workspace whose files' apparent sizes add up to more than the disk limit (its argument):
# a sparse file costs nothing on the tmpfs but its full size in the tar (a host file, or live's workspace).
PACK_WORKSPACE = [
    "python3", "-I", "-S", "-c",
    "import os, stat, sys, tarfile\n"
    "limit, seen, total = int(sys.argv[1]), set(), 0\n"
    "for top, _, names in os.walk('.'):\n"
    "    for name in names:\n"
    "        info = os.lstat(os.path.join(top, name))\n"
    "        if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:\n"  # a hard link once
    "            seen.add((info.st_dev, info.st_ino))\n"
    "            total += info.st_size\n"
    "if total > limit:\n"
    "    sys.exit(f'the workspace holds files of {total} bytes (sparse files counted at their full size), '\n"
    "             f'over its disk limit of {limit} (Limits.disk_bytes)')\n"
    "with tarfile.open(fileobj=sys.stdout.buffer, mode='w|') as tf:\n"
    "    tf.add('.', arcname='.')\n",
]  # fmt: skip
UNPACK_WORKSPACE = [
    "python3", "-I", "-S", "-c",
    "import os, shutil, sys, tarfile\n"
    "safe = {'filter': 'tar'} if hasattr(tarfile, 'tar_filter') else {}\n"  # no absolute or '..' names
    # Opened first: a packer that refused sends nothing, and then what is here stays (ReadError, empty file).
    "with tarfile.open(fileobj=sys.stdin.buffer, mode='r|') as tf:\n"
    "    for entry in os.scandir('.'):\n"  # what the tar holds replaces what is there (a diff commit into live)
    "        shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)\n"
    "    tf.extractall('.', **safe)\n",
]  # fmt: skip


class _Image:
    """A snapshot image; when nothing references it any more its id goes to the garbage list."""

    __slots__ = ("id", "depth", "__weakref__")

    def __init__(self, image_id: str, depth: int, garbage: list[str] | None) -> None:
        self.id = image_id
        self.depth = depth
        if garbage is not None:
            weakref.finalize(self, garbage.append, image_id)


class _Tarball:
    """A tar of a tmpfs workspace in an anonymous host file: closed (and gone) when nothing references it any
    more, and with the process however it ends, so a killed process leaves no tar behind."""

    __slots__ = ("file", "size", "__weakref__")

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()
        self.size = 0
        weakref.finalize(self, self.file.close)

    def write(self, data: bytes) -> None:
        """Append (one writer, before any reader)."""
        self.file.write(data)
        self.size += len(data)

    def chunks(self, size: int = 2**20) -> Iterator[bytes]:
        """The tar from its start; positional reads, so forks may read it at the same time."""
        self.file.flush()
        for offset in range(0, self.size, size):
            yield os.pread(self.file.fileno(), size, offset)


@dataclass(frozen=True)
class DockerRef:
    """What a Docker snapshot holds: the image, (diff commits) the paths changed since live, and (``tmpfs``
    disk cap) the workspace's tar."""

    image: _Image
    changes: frozenset[str]
    backend_id: str
    workspace: _Tarball | None = None


@dataclass(eq=False)
class _Box:
    """One container holding a state (live or a sandbox's)."""

    container: str
    image: _Image
    changes: frozenset[str] = frozenset()
    dirty: bool = False
    cached: DockerRef | None = None


@dataclass(eq=False, kw_only=True)
class DockerSandbox(Branch[_Box]):
    """A fork: a container run from a snapshot image."""

    prefix = "dkr"

    @property
    def container_id(self) -> str:
        return self.state.container


def _talk(sock: Any, payload: bytes, done: threading.Event) -> tuple[bytes, bytes]:
    """Send ``payload`` to an exec's stdin, then read its multiplexed output to the end (blocking)."""
    try:
        raw = sock._sock
        raw.sendall(payload)
        raw.shutdown(socket.SHUT_WR)
        out: list[bytes] = []
        err: list[bytes] = []
        for stream, data in frames_iter(sock, tty=False):
            (out if stream == STDOUT else err).append(data)
        return b"".join(out), b"".join(err)
    finally:
        done.set()


def _close_socket(sock: Any) -> None:
    raw = getattr(sock, "_sock", None)
    if raw is not None:
        try:
            raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    response = getattr(sock, "_response", None)
    if response is not None:
        response.close()  # first: it flushes the reader that wraps ``sock``
    sock.close()
    if raw is not None:
        raw.close()


def _pipe(src: Any, dst: Any, paths: bytes) -> bytes:
    """Feed ``paths`` to a ``--pack`` exec and its tar output into an ``--apply`` exec; returns stderr."""
    raw_src, raw_dst = src._sock, dst._sock
    raw_src.sendall(paths)
    raw_src.shutdown(socket.SHUT_WR)
    errors: list[bytes] = []
    for stream, data in frames_iter(src, tty=False):
        if stream == STDOUT:
            raw_dst.sendall(data)
        else:
            errors.append(data)
    raw_dst.shutdown(socket.SHUT_WR)
    for stream, data in frames_iter(dst, tty=False):
        if stream != STDOUT:
            errors.append(data)
    return b"".join(errors)


def _tar_program(program: SandboxProgram) -> bytes:
    """``/opt/agentspec/{runner,ops}.py``, root-owned and read-only for the sandbox user."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        folder = tarfile.TarInfo(SANDBOX_DIR.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(folder)
        for name, path in (("runner.py", RUNNER_FILE), ("ops.py", program.ops_file)):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{SANDBOX_DIR.lstrip('/')}/{name}")
            info.size, info.mode = len(data), 0o444
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerBackend(ProgramCalls, LineageBackend[_Box]):
    """A working directory inside a Docker container, forked by committing it.  See the module docstring.

    ``image`` is a base image (``agentspec sandbox build``); ``client`` an open
    :class:`docker.DockerClient` (default: ``DOCKER_HOST`` or the default
    socket, closed again by :meth:`close`); ``disk_cap`` how ``Limits.disk_bytes`` is enforced: ``auto``
    (the first the engine supports, see the module docstring) or one of them by name (``tmpfs`` works on any engine).
    """

    resume_by = "replay"
    """A resumed run runs the committed steps again on a fresh one (:data:`agentspec.snapshot.ResumeBy`): the live
    state is made afresh for every episode and answers deterministically."""

    kind = "Docker"

    def __init__(
        self,
        program: SandboxProgram,
        source: Path | None = None,
        *,
        image: str,
        limits: Limits | None = None,
        commit_mode: CommitMode = "promote",
        client: docker.DockerClient | None = None,
        max_layers: int = 100,
        tmp_size: str = "256m",
        disk_cap: DiskCapChoice = "auto",
    ) -> None:
        if source is not None and not source.is_dir():
            raise ConfigError(f"workspace source {source} is not a directory")
        if commit_mode not in ("promote", "diff"):
            raise ConfigError(f"commit_mode must be 'promote' or 'diff', not {commit_mode!r}")
        if disk_cap not in ("auto", "storage-opt", "tmpfs"):
            raise ConfigError(f"disk_cap must be 'auto', 'storage-opt' or 'tmpfs', not {disk_cap!r}")
        super().__init__()
        self.program = program
        self.source = source
        self.image = image
        self.limits = limits or Limits()
        self.commit_mode: CommitMode = commit_mode
        self.max_layers = max(2, max_layers)
        self._tmp_size = tmp_size
        self._disk_cap_choice: DiskCapChoice = disk_cap
        self._disk_cap: containers.DiskCap | None = None
        self._client = client
        self._own_client = client is None
        self._id = secrets.token_hex(4)
        self._counter = itertools.count(1)
        self._garbage: list[str] = []
        self._stuck: list[str] = []
        self._user = "1000:1000"
        self._volumes: dict[str, dict[str, str]] = {}
        self._config: dict[str, Any] = {}

    @property
    def api(self) -> docker.APIClient:
        if self._client is None:
            raise SnapshotError("Docker backend not started")
        return self._client.api

    @property
    def disk_cap(self) -> containers.DiskCap | None:
        """How the disk limit is enforced (see the module docstring), once started; None without one."""
        return self._disk_cap

    @property
    def _tmpfs(self) -> bool:
        return self._disk_cap == "tmpfs"

    @property
    def live_container(self) -> str:
        """The id of the container that holds the live state."""
        return self._require_live().container

    # ------------------------------------------------------------------ setup

    async def start(self) -> None:
        """Connect, sweep leftovers of dead processes, and start the live container."""
        if self._started:
            return
        if self._client is None:
            self._client = await anyio.to_thread.run_sync(containers.connect)
        try:
            await containers.call("sweeping leftovers", containers.sweep, self.api)
            info = await containers.call(f"image {self.image}", self.api.inspect_image, self.image)
            config = info.get("Config") or {}
            self._config = config
            self._user = containers.check_user(config.get("User") or self._user, self.image)
            self._volumes = containers.parse_mounts((config.get("Labels") or {}).get(MOUNTS))
            self._disk_cap = await self._choose_disk_cap(info["Id"])
            depth = len((info.get("RootFS") or {}).get("Layers") or [None])
            seed = await self._seed(info["Id"], depth)
            container = await self._create(seed.id)
            workspace = None
            if self._tmpfs:  # the source goes into live's tmpfs workspace, not into the image the tmpfs hides
                workspace = await self._source_tarball()
                await self._restore(container, workspace)
            # Live starts equal to the seed image (and source): the first snapshot is free.
            cached = DockerRef(image=seed, changes=frozenset(), backend_id=self._id, workspace=workspace)
            self._set_live(_Box(container=container, image=seed, cached=cached))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close()
            raise

    async def _choose_disk_cap(self, image: str) -> containers.DiskCap | None:
        """The disk cap asked for, or (``auto``) the first this engine supports; None without a disk limit."""
        if self.limits.disk_bytes is None:
            return None
        if self._disk_cap_choice != "auto":
            return self._disk_cap_choice
        return await containers.call("probing the engine's disk cap", containers.disk_cap, self.api, image)

    async def _seed(self, base: str, depth: int) -> _Image:
        """The base image plus the runner and the source, committed once.

        Why an image and not files put into the live container: ``docker commit`` copies a container's
        whole writable layer, so a source left there would be copied again by every snapshot of live.
        """
        seed = await self._create(base, install=_tar_program(self.program), start=False)
        try:
            if self.source is not None and not self._tmpfs:
                await self._put_source(seed, self.source)
            result = await containers.call("committing the seed image", self.api.commit, seed, pause=False)
        finally:
            with anyio.CancelScope(shield=True):
                await self._remove_container(seed)
        return _Image(result["Id"], depth + 1, self._garbage)

    def _tar_source(self, fh: Any, arcname: str) -> None:
        """Write a tar of the source to ``fh``, owned by the sandbox user (blocking)."""
        uid, _, gid = self._user.partition(":")

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = int(uid) if uid.isdigit() else 1000
            info.gid = int(gid) if gid.isdigit() else info.uid
            info.uname = info.gname = ""
            return info

        with tarfile.open(fileobj=fh, mode="w|") as tf:  # a stream: ``fh`` may be a _Tarball (no seek, no tell)
            if self.source is not None:
                tf.add(self.source, arcname=arcname, filter=owned)

    async def _source_tarball(self) -> _Tarball:
        """The source as a workspace tar (``tmpfs`` disk cap); an empty tar without one."""
        tarball = _Tarball()
        await anyio.to_thread.run_sync(self._tar_source, tarball, ".")
        return tarball

    async def _put_source(self, container: str, source: Path) -> None:
        def put() -> None:
            # A file, not memory: sources can be hundreds of megabytes.
            with tempfile.TemporaryFile() as fh:
                self._tar_source(fh, WORKSPACE.lstrip("/"))
                fh.seek(0)
                with containers.translated("copying the source into the live container"):
                    self.api.put_archive(container, "/", fh)

        await anyio.to_thread.run_sync(put)

    def _host_config(self, writable_root: bool = False) -> dict[str, Any]:
        """The locked-down container; ``writable_root``: the seed, whose files are put in before it is committed."""
        limits = self.limits
        ulimits = [Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile)]
        if limits.disk_bytes is not None:
            ulimits.append(Ulimit(name="fsize", soft=limits.disk_bytes, hard=limits.disk_bytes))
        tmpfs = {"/tmp": f"size={self._tmp_size},mode=1777"}
        tmpfs_root = self._tmpfs and not writable_root
        if tmpfs_root:
            uid, _, gid = self._user.partition(":")
            owner = f"uid={uid},gid={gid or uid},mode=0755" if uid.isdigit() and (gid or uid).isdigit() else "mode=1777"
            # exec: the workspace holds the programs a tool runs (the engine's tmpfs default is noexec).
            tmpfs[WORKSPACE] = f"size={limits.disk_bytes},{owner},exec"
        storage = self._disk_cap == "storage-opt" and limits.disk_bytes is not None
        return self.api.create_host_config(
            network_mode="none",
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,  # no swap: the memory limit is the limit
            nano_cpus=int(limits.cpus * 1e9) if limits.cpus is not None else None,
            pids_limit=limits.pids,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            tmpfs=tmpfs,
            read_only=tmpfs_root,
            binds=self._volumes or None,
            ulimits=ulimits,
            storage_opt={"size": str(limits.disk_bytes)} if storage else None,
        )

    @property
    def weakened(self) -> str | None:
        """The limits switched off (``"no-pids-limit"``...), as every observation records them; None if none."""
        return ",".join(f"no-{name.removesuffix('_bytes')}-limit" for name in self.limits.unlimited) or None

    @property
    def isolation(self) -> dict[str, object]:
        """What this backend enforces, for reports (a limit that is None is not enforced)."""
        limits = self.limits
        return {
            "backend": "docker",
            "confinement": "container",
            "network": "none",
            "memory_bytes": limits.memory_bytes,
            "pids": limits.pids,
            "cpus": limits.cpus,
            "disk_bytes": limits.disk_bytes,
            "disk_cap": self._disk_cap,
            "weakened": self.weakened,
        }

    async def _create(self, image_id: str, install: bytes | None = None, start: bool = True) -> str:
        """Create (and start) a container of ``image_id`` (``install``: a tar put at / before it starts).

        Nothing is left behind if this fails or is cancelled.
        """
        name = f"agentspec-{self._id}-{next(self._counter)}"
        labels = {LABEL: "1", OWNER: owner_tag(), BACKEND: self._id}

        def create() -> str:
            try:  # the seed (never started, files put in) needs a writable root; the containers that run, not
                container = self.api.create_container(
                    image_id, command=[*RUNNER, "--init"], user=self._user, working_dir=WORKSPACE, labels=labels,
                    host_config=self._host_config(writable_root=not start), name=name, environment=["HOME=/tmp"],
                )  # fmt: skip
            except docker.errors.APIError as exc:
                if self.limits.disk_bytes is not None and containers.is_disk_limit_refusal(exc):
                    raise containers.disk_limit_error(exc) from exc
                raise
            if container.get("Warnings"):  # e.g. "... limit discarded": the container would be less confined
                raise SnapshotError(f"the Docker engine would not apply every sandbox option: {container['Warnings']}")
            if install is not None:  # before the start: the runner is the container's PID 1
                self.api.put_archive(container["Id"], "/", install)
            if start:
                self.api.start(container["Id"])
            return str(container["Id"])

        try:
            return await containers.call(f"starting a container of {image_id[:19]}", create)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._remove_container(name)
            raise

    async def _remove_container(self, container: str) -> None:
        def remove() -> None:
            try:
                self.api.remove_container(container, force=True)
            except docker.errors.NotFound:
                pass

        await containers.call(f"removing container {container[:12]}", remove)

    async def close(self) -> None:
        """Remove every container and image this backend made, and close the client if it is ours."""
        client, self._client = self._client, None
        if client is None:
            return
        self._forget_sandboxes()
        api = client.api

        def clean() -> None:
            for info in api.containers(all=True, filters={"label": f"{BACKEND}={self._id}"}):
                try:
                    api.remove_container(info["Id"], force=True)
                except docker.errors.NotFound:
                    pass
            images = api.images(all=True, filters={"label": f"{BACKEND}={self._id}"})
            images.sort(key=lambda info: info.get("Created", 0), reverse=True)
            containers.remove_images(api, [info["Id"] for info in images])

        try:
            await containers.call("cleaning up", clean)
        finally:
            if self._own_client:
                client.close()

    # ------------------------------------------------------------------ the mechanism

    def _branch(self, state: _Box, lineage: tuple[str, ...], token: str) -> DockerSandbox:
        return DockerSandbox(calls=self, state=state, lineage=lineage, token=token)

    def _accepts(self, ref: object) -> bool:
        return isinstance(ref, DockerRef) and ref.backend_id == self._id

    async def _fork_state(self, ref: DockerRef) -> _Box:
        """A new container from the snapshot image (``tmpfs``: with the snapshot's workspace unpacked in it)."""
        container = await self._create(ref.image.id)
        if ref.workspace is not None:
            try:
                await self._restore(container, ref.workspace)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._remove_container(container)
                raise
        return _Box(container=container, image=ref.image, changes=ref.changes)

    async def _promote(self, box: _Box, live: _Box) -> _Box:
        """The fork's container becomes live (promote), or its changes are applied to live's (diff)."""
        if self.commit_mode == "promote":
            new_live, doomed = box, live.container
        else:
            await (self._copy_workspace(box, live) if self._tmpfs else self._apply_diff(box, live))
            live.dirty, live.cached = True, None
            new_live, doomed = live, box.container
        await self._remove_container(doomed)
        await self._collect()
        return new_live

    async def _drop(self, box: _Box) -> None:
        """Remove the container (its image goes once unused)."""
        await self._remove_container(box.container)
        await self._collect()

    async def _changed_paths(self, box: _Box) -> set[str]:
        changes = await containers.call("diffing a container", self.api.diff, box.container) or []
        return {c["Path"] for c in changes if not c["Path"].startswith(_IGNORED_CHANGES)}

    async def _freeze(self, box: _Box) -> DockerRef:
        """An image of the box's state (caller holds its lock); reused while the box is unchanged."""
        if not box.dirty and box.cached is not None:
            return box.cached
        if self._tmpfs:  # the root is read-only: the workspace is the whole state, the image stays as it is
            box.cached = DockerRef(image=box.image, changes=frozenset(), backend_id=self._id,
                                   workspace=await self._pack(box.container))
            box.dirty = False
            return box.cached
        changes = box.changes
        if self.commit_mode == "diff" and box is not self._head.state:
            changes = changes | await self._changed_paths(box)
        if box.image.depth + 1 > self.max_layers:
            image = await self._flatten(box)
        else:
            # No pause: nothing runs in the box while we hold its lock, and no process outlives a call.
            result = await containers.call("committing a container", self.api.commit, box.container, pause=False)
            image = _Image(result["Id"], box.image.depth + 1, self._garbage)
        box.cached = DockerRef(image=image, changes=frozenset(changes), backend_id=self._id)
        box.dirty = False
        return box.cached

    async def _flatten(self, box: _Box) -> _Image:
        """Export the container's filesystem and import it as a one-layer image with the base's config."""
        changes = [f"USER {self._user}", f"WORKDIR {self._config.get('WorkingDir') or WORKSPACE}"]
        changes += [f"ENV {item}" for item in self._config.get("Env") or []]
        labels = {**(self._config.get("Labels") or {}), LABEL: "1", OWNER: owner_tag(), BACKEND: self._id}
        changes += [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]

        def flatten() -> str:
            with tempfile.TemporaryFile(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as fh:
                for chunk in self.api.export(box.container):
                    fh.write(chunk)
                fh.seek(0)
                answer = self.api.import_image(src=fh, changes=changes)
            status = json.loads(str(answer).strip().splitlines()[-1])["status"]
            return str(status)

        image = _Image(await containers.call("flattening a container", flatten), 1, self._garbage)
        self._garbage.extend(self._stuck)  # the old chain loses its last child once this box moves on
        self._stuck.clear()
        return image

    async def _collect(self) -> None:
        """Remove snapshot images nothing references any more.

        An image with child images (the history of a promoted container) cannot go yet; it waits in
        ``_stuck`` and is tried again only after a flatten frees the chain (and at close), so a commit
        does not pay one API call per layer of history.
        """
        if not self._garbage:
            return
        ids, self._garbage[:] = list(self._garbage), []
        left = await containers.call("removing images", containers.remove_images, self.api, ids)
        self._stuck.extend(left)

    async def _exec_start(self, container: str, cmd: list[str]) -> tuple[str, Any]:
        def start() -> tuple[str, Any]:
            exec_id = self.api.exec_create(container, cmd, stdin=True, user=self._user, workdir=WORKSPACE)["Id"]
            return exec_id, self.api.exec_start(exec_id, socket=True)

        return await containers.call("starting a command in a container", start)

    async def _exec(self, container: str, payload: bytes) -> tuple[int, bytes, bytes]:
        """Run the runner with ``payload`` on stdin; cancellation kills every process of the call."""
        exec_id, sock = await self._exec_start(container, RUNNER)
        done = threading.Event()
        try:
            out, err = await anyio.to_thread.run_sync(_talk, sock, payload, done, abandon_on_cancel=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                # Killing the docker client side does not stop an exec: kill the processes inside.
                await self._kill_all(container)
                await anyio.to_thread.run_sync(done.wait, 10.0)
            raise
        finally:
            _close_socket(sock)  # after a kill the reader has ended; if not, the shutdown wakes it
        info = await containers.call("inspecting a command", self.api.exec_inspect, exec_id)
        return int(info.get("ExitCode") or 0), out, err

    async def _kill_all(self, container: str) -> None:
        def kill() -> None:
            try:
                exec_id = self.api.exec_create(container, KILL_ALL, user=self._user)["Id"]
                self.api.exec_start(exec_id)
            except docker.errors.APIError:
                pass  # the container is gone already: so are its processes

        await containers.call("killing a call", kill)

    async def _apply_diff(self, box: _Box, live: _Box) -> None:
        """Copy the paths the fork (and its ancestors) changed into the live container, deletions included."""
        paths = sorted(box.changes | await self._changed_paths(box))
        if not paths:
            return
        _, src = await self._exec_start(box.container, [*RUNNER, "--pack"])
        try:
            apply_id, dst = await self._exec_start(live.container, [*RUNNER, "--apply"])
            try:
                payload = json.dumps({"paths": paths}).encode()
                errors = await containers.call("applying a diff", _pipe, src, dst, payload)
            finally:
                _close_socket(dst)
        finally:
            _close_socket(src)
        info = await self._finished(apply_id)
        if info.get("ExitCode"):
            raise SnapshotError(f"applying the fork's changes failed: {errors.decode(errors='replace')[-500:]}")

    async def _finished(self, exec_id: str, within_s: float = 30.0) -> dict[str, Any]:
        """The exec's final state: its output can end a moment before Docker records its exit code."""
        with anyio.move_on_after(within_s):
            while True:
                info: dict[str, Any] = await containers.call("inspecting a command", self.api.exec_inspect, exec_id)
                if not info.get("Running"):
                    return info
                await anyio.sleep(0.01)
        raise SnapshotError(f"a command in the sandbox did not finish within {within_s}s of closing its output")

    async def _run(self, box: _Box, step: Op, call: ToolCall, requestor: Requestor) -> Observation:
        """Run one op in ``box`` (the caller holds its lock and its deadline; cancelling kills the op)."""
        if self.effect(call.name) is not Effect.READ_ONLY:
            box.dirty = True  # set first: a call killed half way may still have written
        payload = self.program.request(
            step, self.limits, workspace=WORKSPACE, ops_path=f"{SANDBOX_DIR}/ops.py", reap=True, memory_rlimit=False
        )
        code, out, err = await self._exec(box.container, payload)
        observation = runner_observation(call, requestor, code, out, err)
        overrun = await self._disk_overrun(box)
        return error_observation(call, requestor, overrun) if overrun is not None else observation

    async def _disk_overrun(self, box: _Box) -> str | None:
        """Why a call that may have written left ``box`` over its disk limit, or None (also for other subclasses'
        calls: the MCP toolkit's server writes into the same container)."""
        if box.dirty and self._disk_cap == "storage-opt":  # a tmpfs cap is exact: no backstop needed
            written = await self._writable_bytes(box.container)
            # disk_bytes is set: the storage-opt cap is only ever chosen with a disk limit (_choose_disk_cap).
            if self.limits.disk_bytes is not None and written > self.limits.disk_bytes:
                # The backstop behind the engine's quota, which btrfs applies lazily to some containers: the
                # call that leaves the writable layer over the limit fails, and so does every later writing call.
                return (f"the sandbox's writable layer holds {written} bytes, over its disk limit of "
                        f"{self.limits.disk_bytes} (Limits.disk_bytes)")
        return None

    async def _writable_bytes(self, container: str) -> int:
        """The size of a container's writable layer (the engine's ``SizeRw``)."""

        def size() -> int:
            url = self.api._url("/containers/{0}/json", container)
            return int(self.api._result(self.api._get(url, params={"size": 1}), True).get("SizeRw") or 0)

        return await containers.call("measuring a container's writable layer", size)

    async def _pack(self, container: str) -> _Tarball:
        """A tar of the container's tmpfs workspace, in a host file."""
        tarball = _Tarball()
        exec_id, sock = await self._exec_start(container, self._pack_command())
        cap = self._tar_cap()

        def read() -> bytes:
            errors: list[bytes] = []
            sock._sock.shutdown(socket.SHUT_WR)
            for stream, data in frames_iter(sock, tty=False):
                if stream == STDOUT:
                    tarball.write(data)
                    if tarball.size > cap:  # the packer's own check is the sandbox's code: count here too
                        raise SnapshotError(f"the sandbox's workspace tar grew past {cap} bytes, over what its "
                                            f"disk limit of {self.limits.disk_bytes} (Limits.disk_bytes) allows")
                else:
                    errors.append(data)
            return b"".join(errors)

        try:
            errors = await containers.call("packing a workspace", read)
        finally:
            _close_socket(sock)
        await self._check_exit(exec_id, "packing the sandbox's workspace", errors)
        return tarball

    def _pack_command(self) -> list[str]:
        """The packer, refusing files of more apparent bytes than the disk limit (a tmpfs workspace has one)."""
        return [*PACK_WORKSPACE, str(self.limits.disk_bytes or 0)]

    def _tar_cap(self) -> int:
        """The most bytes a workspace tar may take on the host: the files' data (at most ``disk_bytes``, which the
        packer checks) plus tar headers and padding, of 1 KiB or so a file (a file takes 4 KiB of tmpfs, unless
        empty); so a tar over it is not a workspace's honest copy."""
        return 2 * (self.limits.disk_bytes or 0) + 2**20

    async def _restore(self, container: str, tarball: _Tarball) -> None:
        """Unpack a workspace tar into the container's (empty or replaced) tmpfs workspace."""
        exec_id, sock = await self._exec_start(container, UNPACK_WORKSPACE)

        def write() -> bytes:
            raw = sock._sock
            try:
                for chunk in tarball.chunks():
                    raw.sendall(chunk)
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the unpacker stopped reading (it failed): its exit code and stderr say why
            return b"".join(data for stream, data in frames_iter(sock, tty=False) if stream != STDOUT)

        try:
            errors = await containers.call("unpacking a workspace", write)
        finally:
            _close_socket(sock)
        await self._check_exit(exec_id, "unpacking a workspace into the sandbox", errors)

    async def _copy_workspace(self, box: _Box, live: _Box) -> None:
        """A diff commit with a tmpfs workspace: live's workspace becomes a copy of the fork's."""
        pack_id, src = await self._exec_start(box.container, self._pack_command())
        try:
            apply_id, dst = await self._exec_start(live.container, UNPACK_WORKSPACE)
            try:
                errors = await containers.call("copying a workspace", _pipe, src, dst, b"")
            finally:
                _close_socket(dst)
        finally:
            _close_socket(src)
        # The packer's stderr comes first (the unpacker's follows): a refusal says why, and live stays as it was.
        await self._check_exit(pack_id, "packing the fork's workspace", errors[:500])
        await self._check_exit(apply_id, "copying the fork's workspace into live", errors)

    async def _check_exit(self, exec_id: str, what: str, errors: bytes) -> None:
        info = await self._finished(exec_id)
        if info.get("ExitCode"):
            raise SnapshotError(f"{what} failed: {errors.decode(errors='replace')[-500:]}")
