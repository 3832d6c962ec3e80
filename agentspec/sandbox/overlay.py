"""Filesystem sandboxes: one overlayfs mount per fork with its upper dir on tmpfs, or copies on tmpfs.

A working directory is the state.  In ``overlay`` mode (root, or a process
inside ``unshare -Urm``) every state is a stack of frozen *layers* plus a
mutable upper directory, mounted with overlayfs::

    live     = overlay(lower = L2:L1:source, upper = U_live)
    snapshot = freeze U_live into layer L3, remount live on a fresh upper   (only if live changed)
    fork     = overlay(lower = L3:L2:L1:source, upper = U_fork)             (~1 ms, any tree size)
    commit   = the fork's stack and upper become live (remounted at the live path: promotion)
    discard  = unmount, drop U_fork

The source directory is the bottom layer and is never written.  All scratch
lives on a private tmpfs that :meth:`OverlayBackend.close` unmounts at once
(deleting big trees on ``/`` is slow).  Stacks deeper than ``max_layers`` are
squashed in user space (:func:`merge_layers`), which costs the size of the
changes, never of the base.

Where overlay mounts are refused, ``copy`` mode keeps every state as a full
copy on tmpfs (snapshot and fork cost the tree size; commit is still a pointer
swap).  Both modes isolate alike; ``mode`` only changes the cost.

What is promised and enforced (each one, or the backend refuses to start with a
:class:`SnapshotError` naming what is missing):

- confinement: every call runs under bubblewrap (:mod:`agentspec.sandbox._host`):
  no network (a private network namespace with only ``lo``), no host process
  visible (a private PID namespace), nothing writable but its tree and a private
  ``/tmp``, an unprivileged user with no capabilities.  Without a usable
  ``bwrap`` the backend refuses (``apt-get install bubblewrap``).
  ``confinement="none"`` is the only way to run tools unconfined: an explicit
  opt-in, reported by :attr:`OverlayBackend.isolation` and in every observation
  (``isolation="unconfined"``).
- no process outlives a call: the PID namespace ends with it; a cancelled or
  timed-out call is killed with its whole process tree.
- disk (``Limits.disk_bytes``, 1 GiB by default): the scratch tmpfs holding the
  live tree, every fork and every snapshot layer is mounted with that ``size=``
  (together, not each: a fork that fills it makes writes fail elsewhere until
  it is discarded); each file a call writes is capped by RLIMIT_FSIZE, and the
  jail's ``/tmp`` is a tmpfs of the same size.  A host that refuses the tmpfs
  mount (no root, no mount namespace) is refused unless ``disk_bytes=None``.
  The overlay's bottom layer is the source directory itself, read-only.
- memory (``Limits.memory_bytes``): RLIMIT_AS of each process of a call.
- processes (``Limits.pids``): RLIMIT_NPROC in the jail's user namespace; for
  root (whose processes the kernel exempts from it, also inside ``unshare -Ur``)
  a pids cgroup per call (cgroup v1 or v2), refused where none is writable
  unless ``pids=None``.
- ``Limits.cpus`` cannot be enforced without a cgroup CPU controller: setting it
  is a ConfigError here (use the Docker backend).

The state of a sandbox is its files: no process outlives a call.
"""

from __future__ import annotations

import itertools
import os
import secrets
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

import anyio

from agentspec.errors import ConfigError, SnapshotError
from agentspec.sandbox import _mounts
from agentspec.sandbox._cgroup import (
    ENTER,
    PidsCgroups,
    pids_root,
    remove_group,
    rlimit_nproc_binds,
    sweep_cgroups,
)
from agentspec.sandbox._host import Confinement, HostJail, check_confinement, host_jail, run_confined
from agentspec.sandbox._layers import copy_tree, merge_layers, remove_tree
from agentspec.sandbox._owner import owner_dead, owner_tag, start_time
from agentspec.sandbox.program import (
    Limits,
    Op,
    SandboxProgram,
    answer_observation,
    error_observation,
    plan,
    with_isolation,
)
from agentspec.snapshot import Sandbox, Snapshot, check_descends, new_token
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

Mode = Literal["overlay", "copy"]
PREFIX = "agentspec-ws-"
_ids = itertools.count(1)


class _Layer:
    """A frozen directory; when nothing references it any more its path goes to the trash."""

    __slots__ = ("path", "__weakref__")

    def __init__(self, path: Path, trash: list[Path] | None) -> None:
        self.path = path
        if trash is not None:
            weakref.finalize(self, trash.append, path)


@dataclass(frozen=True)
class OverlayRef:
    """What an overlay snapshot holds: the frozen layers of the state, lowest first."""

    layers: tuple[_Layer, ...]
    backend_id: str


@dataclass(eq=False)
class _Tree:
    """One mutable state (live or a sandbox): frozen layers plus an upper dir, or a full copy."""

    layers: tuple[_Layer, ...]
    upper: Path
    work: Path | None = None
    mount: Path | None = None
    dirty: bool = False
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def view(self) -> Path:
        """The directory tools see."""
        return self.mount or self.upper


@dataclass(eq=False)
class OverlaySandbox:
    """A fork: its own overlay mount (or copy) of a snapshot."""

    backend: OverlayBackend = field(repr=False)
    tree: _Tree = field(repr=False)
    lineage: tuple[str, ...]
    token: str
    id: str = field(default_factory=lambda: f"ovl-{next(_ids)}")
    discarded: bool = False
    _running: anyio.CancelScope | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        """The sandbox's working tree, as a directory on this host."""
        return self.tree.view

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        return await self.backend._execute_in(self, call, requestor)


def default_scratch() -> Path:
    """``$AGENTSPEC_SCRATCH``, else ``/dev/shm`` (tmpfs), else the temp dir."""
    chosen = os.environ.get("AGENTSPEC_SCRATCH")
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def sweep_scratch(base: Path) -> list[Path]:
    """Unmount and delete the scratch roots under ``base`` whose owning process is gone."""
    swept = []
    host = owner_tag().split(":")[0]
    for entry in base.glob(f"{PREFIX}*"):
        parts = entry.name[len(PREFIX) :].split("-")
        if len(parts) < 3 or not owner_dead(f"{host}:{parts[0]}:{parts[1]}"):
            continue
        _mounts.unmount_all(entry)
        remove_tree(entry)
        swept.append(entry)
    return swept


def _probe_overlay(root: Path, options: str) -> bool:
    probe = root / "probe"
    dirs = [probe / name for name in ("lower", "upper", "work", "mnt")]
    for d in dirs:
        d.mkdir(parents=True)
    try:
        _mounts.mount("overlay", dirs[3], "overlay", 0, f"lowerdir={dirs[0]},upperdir={dirs[1]},workdir={dirs[2]}{options}")
        _mounts.umount(dirs[3])
        return True
    except OSError:
        return False
    finally:
        remove_tree(probe)


class OverlayBackend:
    """A working directory forked with overlayfs (or copies) on tmpfs.  See the module docstring.

    Use as ``async with OverlayBackend(program, source) as backend:`` (or
    ``await OverlayBackend.open(...)`` and ``await backend.close()``).  The live
    tree is visible at :attr:`workdir`; a sandbox's at ``sandbox.path``.
    """

    def __init__(
        self,
        program: SandboxProgram,
        source: Path | None = None,
        *,
        mode: Mode | Literal["auto"] = "auto",
        confinement: Confinement = "bwrap",
        limits: Limits | None = None,
        scratch: Path | None = None,
        max_layers: int = 16,
    ) -> None:
        if source is not None and not source.is_dir():
            raise ConfigError(f"workspace source {source} is not a directory")
        if source is not None and any(ch in str(source.resolve()) for ch in ",:\\"):
            raise ConfigError(f"workspace source {source}: overlayfs cannot use a path with ',', ':' or '\\'")
        if mode not in ("auto", "overlay", "copy"):
            raise ConfigError(f"mode must be 'auto', 'overlay' or 'copy', not {mode!r}")
        self.program = program
        self.source = source.resolve() if source is not None else None
        self.limits = limits or Limits()
        if self.limits.cpus is not None:
            raise ConfigError(
                "the overlay and copy backends cannot cap CPUs (no cgroup CPU controller): "
                "leave Limits.cpus unset, or use the docker backend"
            )
        self.max_layers = max(2, max_layers)
        self.live_token = new_token()
        self._wanted_mode = mode
        self._confinement = check_confinement(confinement)
        self._scratch = scratch or default_scratch()
        self._pids: PidsCgroups | None = None
        self._id = secrets.token_hex(4)
        self._counter = itertools.count(1)
        self._trash: list[Path] = []
        self._sandboxes: set[OverlaySandbox] = set()
        self._root: Path | None = None
        self._tmpfs = False
        self._options = "" if _mounts.in_initial_user_namespace() else ",userxattr"
        self._xattr = "trusted.overlay.opaque" if not self._options else "user.overlay.opaque"
        self.mode: Mode = "copy"
        self.jail: HostJail | None = None
        self._live: _Tree | None = None
        self._live_lock = anyio.Lock()  # guards the live slot: live calls, live snapshots, commits

    @classmethod
    async def open(cls, program: SandboxProgram, source: Path | None = None, **options: object) -> OverlayBackend:
        backend = cls(program, source, **options)  # type: ignore[arg-type]
        await backend.start()
        return backend

    async def __aenter__(self) -> OverlayBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    # ------------------------------------------------------------------ setup

    async def start(self) -> None:
        """Sweep leftovers of dead processes, mount the scratch tmpfs, choose the mode, set up live."""
        if self._root is not None:
            return
        self._scratch.mkdir(parents=True, exist_ok=True)
        await anyio.to_thread.run_sync(sweep_scratch, self._scratch)
        pid = os.getpid()
        root = self._scratch / f"{PREFIX}{pid}-{start_time(pid)}-{self._id}"
        root.mkdir(mode=0o700)
        self._root = root
        try:
            await self._setup(root)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close()
            raise

    async def _setup(self, root: Path) -> None:
        disk = self.limits.disk_bytes
        size = f"size={disk}," if disk is not None else ""
        try:
            _mounts.mount("tmpfs", root, "tmpfs", 0, f"{size}mode=0700")
            _mounts.make_private(root)
            self._tmpfs = True
        except OSError as exc:
            if disk is not None:
                raise SnapshotError(
                    f"cannot enforce the disk limit (Limits.disk_bytes={disk}): mounting a tmpfs is refused here "
                    f"({exc.strerror}); run as root or inside `unshare -Urm`, or pass Limits(disk_bytes=None) "
                    "to run without a disk limit (reported in every result)"
                ) from exc
            self._tmpfs = False  # disk_bytes=None: plain directories (on /dev/shm by default)
        overlay_ok = self._tmpfs and self._wanted_mode != "copy" and _probe_overlay(root, self._options)
        if self._wanted_mode == "overlay" and not overlay_ok:
            raise SnapshotError("overlayfs mounts are refused here (needs root or a user+mount namespace)")
        self.mode = "overlay" if overlay_ok else "copy"
        self.jail = await host_jail(self._confinement, self.program.ops_file, tmp_bytes=disk)
        if self.jail.kind == "bwrap" and self.limits.pids is not None and not rlimit_nproc_binds():
            self._pids = await anyio.to_thread.run_sync(self._pids_cgroups)
        for sub in ("layers", "trees", "mnt"):
            (root / sub).mkdir()
        if self.mode == "overlay":
            base = _Layer(self.source, None) if self.source else self._new_layer()
            self._live = await self._new_tree((base,), root / "live")
        else:
            live = self._new_tree_dir()
            if self.source:
                await copy_tree(self.source, live)
            self._live = _Tree(layers=(), upper=live, dirty=True)
            (root / "live").symlink_to(live)

    def _pids_cgroups(self) -> PidsCgroups:
        """Per-call pids cgroups (root: RLIMIT_NPROC does not bind root's processes); refuse without them."""
        root = pids_root()
        problem = "no writable cgroup offers the pids controller (cgroup v1 pids or v2 +pids)"
        if root is not None:
            sweep_cgroups(root)
            try:
                return PidsCgroups(root, self._id)
            except OSError as exc:
                problem = f"making a pids cgroup under {root} failed: {exc}"
        raise SnapshotError(
            f"cannot enforce the process limit (Limits.pids={self.limits.pids}) as root: {problem}; "
            "mount the pids cgroup, or pass Limits(pids=None) to run without it (reported in every result)"
        )

    @property
    def confinement(self) -> Confinement:
        """``"bwrap"`` (tools jailed) or ``"none"`` (the caller opted out: tools run unconfined)."""
        return self._confinement

    @property
    def weakened(self) -> str | None:
        """The isolation opt-ins in force, as every observation records them (None: everything promised)."""
        names = []
        if self._confinement == "none":
            names.append("unconfined")
        names += [f"no-{name.removesuffix('_bytes')}-limit" for name in self.limits.unlimited]
        return ",".join(names) or None

    @property
    def isolation(self) -> dict[str, object]:
        """What this backend enforces, for reports: confinement, network, and each limit (None: not enforced)."""
        jailed = self._confinement == "bwrap"
        return {
            "backend": self.mode,
            "confinement": self._confinement,
            "network": "none" if jailed else "host",
            "memory_bytes": self.limits.memory_bytes,
            "pids": self.limits.pids if jailed else None,
            "disk_bytes": self.limits.disk_bytes,
            "weakened": self.weakened,
        }

    @property
    def workdir(self) -> Path:
        """The live working tree."""
        if self._root is None:
            raise SnapshotError("backend not started")
        return self._root / "live"

    def _new_layer(self) -> _Layer:
        assert self._root is not None
        path = self._root / "layers" / str(next(self._counter))
        path.mkdir()
        return _Layer(path, self._trash)

    def _new_tree_dir(self) -> Path:
        assert self._root is not None
        path = self._root / "trees" / str(next(self._counter))
        path.mkdir()
        return path

    async def _new_tree(self, layers: tuple[_Layer, ...], mountpoint: Path) -> _Tree:
        """An overlay tree on ``layers`` with a fresh upper, mounted at ``mountpoint``."""
        tree = _Tree(layers=layers, upper=Path(), dirty=False)
        self._fresh_upper(tree)
        mountpoint.mkdir(exist_ok=True)
        tree.mount = mountpoint
        self._mount(tree)
        return tree

    def _fresh_upper(self, tree: _Tree) -> None:
        base = self._new_tree_dir()
        tree.upper, tree.work = base / "upper", base / "work"
        tree.upper.mkdir()
        tree.work.mkdir()

    def _mount(self, tree: _Tree) -> None:
        assert tree.mount is not None
        lower = ":".join(str(layer.path) for layer in reversed(tree.layers))
        options = f"lowerdir={lower},upperdir={tree.upper},workdir={tree.work}{self._options}"
        try:
            _mounts.mount("overlay", tree.mount, "overlay", 0, options)
        except OSError as exc:
            raise SnapshotError(f"overlay mount failed: {exc}") from exc

    async def _unmount(self, tree: _Tree) -> None:
        if tree.mount is not None:
            # Detached: a stray reference (a shell cd'd into the tree) must not block a commit.
            await anyio.to_thread.run_sync(_mounts.umount, tree.mount, True)

    # ------------------------------------------------------------------ protocol

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        return self.program.tool_specs(requestor)

    def effect(self, name: str) -> Effect:
        return self.program.effect(name)

    async def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run a call on the live tree (a call that may write gives live a new token)."""
        step = plan(self.program, call, requestor)
        if isinstance(step, Observation):
            return step
        async with self._live_lock:
            observation = await self._run(self._require_live(), step, call, requestor, None)
            if self.effect(call.name) is not Effect.READ_ONLY:
                self.live_token = new_token()  # read-only calls leave live, and every fork of it, valid
        return observation

    async def snapshot(self, source: Sandbox | None = None) -> Snapshot:
        """Freeze the live tree, or a sandbox's (O(1) when it did not change since the last freeze)."""
        if source is None:
            async with self._live_lock:
                layers = await self._freeze(self._require_live())
                return Snapshot(ref=OverlayRef(layers, self._id), lineage=(self.live_token,))
        sandbox = self._own(source)
        async with sandbox.tree.lock:
            self._own(sandbox)
            ref = OverlayRef(await self._freeze(sandbox.tree), self._id)
            return Snapshot(ref=ref, lineage=(*sandbox.lineage, sandbox.token))

    async def fork(self, snapshot: Snapshot) -> OverlaySandbox:
        ref = snapshot.ref
        if not isinstance(ref, OverlayRef) or ref.backend_id != self._id:
            raise SnapshotError("snapshot does not belong to this overlay backend")
        assert self._root is not None
        tree: _Tree | None = None
        try:
            if self.mode == "overlay":
                tree = await self._new_tree(ref.layers, self._root / "mnt" / str(next(self._counter)))
            else:
                tree = _Tree(layers=ref.layers, upper=self._new_tree_dir())
                await copy_tree(ref.layers[0].path, tree.upper)
        except BaseException:
            with anyio.CancelScope(shield=True):
                if tree is not None:
                    await self._drop(tree)
            raise
        sandbox = OverlaySandbox(backend=self, tree=tree, lineage=snapshot.lineage, token=snapshot.token)
        self._sandboxes.add(sandbox)
        return sandbox

    async def commit(self, sandbox: Sandbox) -> None:
        """Promote the sandbox's tree to live; :class:`StaleSnapshotError` unless it descends from live."""
        box = self._own(sandbox)
        async with self._live_lock, box.tree.lock:
            self._own(box)
            live = self._require_live()
            check_descends(box, self.live_token)
            # The swap must not be left half done by a cancellation.
            with anyio.CancelScope(shield=True):
                await self._promote(box.tree, live)
                self._live = box.tree
                self.live_token = box.token
                box.discarded = True
                self._sandboxes.discard(box)
                await self._drop(live)

    async def _promote(self, tree: _Tree, live: _Tree) -> None:
        assert self._root is not None
        link = self._root / "live"
        if self.mode == "overlay":
            await self._unmount(tree)
            await self._unmount(live)
            live.mount = None
            tree.mount = link
            self._mount(tree)
        else:
            tmp = self._root / f"live.{next(self._counter)}"
            tmp.symlink_to(tree.upper)
            os.replace(tmp, link)  # atomic: the live path never dangles

    async def discard(self, sandbox: Sandbox) -> None:
        """Stop whatever runs in the sandbox and drop its tree (layers shared with snapshots stay)."""
        if not isinstance(sandbox, OverlaySandbox) or sandbox.backend is not self or sandbox.discarded:
            return
        sandbox.discarded = True
        if sandbox._running is not None:
            sandbox._running.cancel()  # discard kills a running call for real
        with anyio.CancelScope(shield=True):
            async with sandbox.tree.lock:
                self._sandboxes.discard(sandbox)
                await self._drop(sandbox.tree)

    async def close(self) -> None:
        """Unmount and delete everything this backend made (the tmpfs goes in one unmount)."""
        root, self._root = self._root, None
        if root is None:
            return
        for sandbox in list(self._sandboxes):
            sandbox.discarded = True
            if sandbox._running is not None:
                sandbox._running.cancel()
        self._sandboxes.clear()
        self._live = None
        pids, self._pids = self._pids, None
        if pids is not None:
            await anyio.to_thread.run_sync(pids.close)
        await anyio.to_thread.run_sync(_mounts.unmount_all, root)
        await anyio.to_thread.run_sync(remove_tree, root)

    # ------------------------------------------------------------------ internals

    def _require_live(self) -> _Tree:
        if self._live is None:
            raise SnapshotError("overlay backend is not started (or already closed)")
        return self._live

    def _own(self, sandbox: Sandbox) -> OverlaySandbox:
        if not isinstance(sandbox, OverlaySandbox) or sandbox.backend is not self or sandbox.discarded:
            raise SnapshotError("can only use a live sandbox of this backend")
        return sandbox

    async def _freeze(self, tree: _Tree) -> tuple[_Layer, ...]:
        """The tree's state as frozen layers; the tree goes on from a fresh upper (caller holds the lock)."""
        if not tree.dirty:
            return tree.layers
        layer = self._new_layer()
        if self.mode == "copy":
            await copy_tree(tree.upper, layer.path)
            tree.layers = (layer,)
            tree.dirty = False
            return tree.layers
        with anyio.CancelScope(shield=True):  # never leave a tree unmounted
            await self._unmount(tree)
            layer.path.rmdir()
            os.rename(tree.upper, layer.path)
            assert tree.work is not None
            old_work = tree.work
            layers = (*tree.layers, layer)
            if len(layers) > self.max_layers:
                layers = (layers[0], await self._squash(layers[1:]))
            tree.layers = layers
            self._fresh_upper(tree)
            self._mount(tree)
            tree.dirty = False
            await anyio.to_thread.run_sync(remove_tree, old_work.parent)
        return tree.layers

    async def _squash(self, layers: tuple[_Layer, ...]) -> _Layer:
        merged = self._new_layer()
        paths = [layer.path for layer in layers]
        await anyio.to_thread.run_sync(merge_layers, paths, merged.path, self._xattr)
        return merged

    async def _drop(self, tree: _Tree) -> None:
        await self._unmount(tree)
        doomed = [tree.upper.parent if self.mode == "overlay" else tree.upper, *self._trash]
        self._trash.clear()
        if tree.mount is not None:
            doomed.append(tree.mount)
        for path in doomed:
            await anyio.to_thread.run_sync(remove_tree, path)

    async def _execute_in(self, sandbox: OverlaySandbox, call: ToolCall, requestor: Requestor) -> Observation:
        self._own(sandbox)
        step = plan(self.program, call, requestor)
        if isinstance(step, Observation):
            return step
        async with sandbox.tree.lock:
            self._own(sandbox)
            observation = await self._run(sandbox.tree, step, call, requestor, sandbox)
            if self.effect(call.name) is not Effect.READ_ONLY:
                sandbox.token = new_token()
        return observation

    async def _run(
        self, tree: _Tree, step: Op, call: ToolCall, requestor: Requestor, sandbox: OverlaySandbox | None
    ) -> Observation:
        """Run one op in ``tree`` (the caller holds the tree's lock); the deadline or a discard kills it."""
        if self.program.effect(call.name) is not Effect.READ_ONLY:
            tree.dirty = True  # set first: a call killed half way may still have written
        jail = self._require_jail()
        workspace, ops_path = jail.paths(tree.view)
        # RLIMIT_NPROC binds only in the jail's user namespace of a non-root user; root uses a pids cgroup.
        nproc = jail.kind == "bwrap" and self._pids is None
        payload = self.program.request(
            step, self.limits, workspace=workspace, ops_path=ops_path, reap=jail.reaps, pids_rlimit=nproc
        )
        assert self._root is not None
        cwd = tree.view if jail.kind == "none" else self._root
        argv, group = jail.argv(tree.view), None
        code, out, err = -1, b"", b""  # what a call cancelled before it answered leaves
        if self._pids is not None and self.limits.pids is not None:
            group = await anyio.to_thread.run_sync(self._pids.new_call, self.limits.pids)
            argv = ["/bin/sh", "-c", ENTER, str(group), *argv]
        with anyio.CancelScope(deadline=anyio.current_time() + self.limits.call_timeout_s) as scope:
            if sandbox is not None:
                sandbox._running = scope
            try:
                code, out, err = await run_confined(argv, payload, cwd)
            finally:
                if sandbox is not None:
                    sandbox._running = None
                if group is not None:
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(remove_group, group)
        return with_isolation(self._observe(call, requestor, sandbox, scope, code, err, out), self.weakened)

    def _require_jail(self) -> HostJail:
        if self.jail is None:
            raise SnapshotError("overlay backend is not started (or already closed)")
        return self.jail

    def _observe(
        self,
        call: ToolCall,
        requestor: Requestor,
        sandbox: OverlaySandbox | None,
        scope: anyio.CancelScope,
        code: int,
        err: bytes,
        out: bytes,
    ) -> Observation:
        if scope.cancelled_caught:
            if sandbox is not None and sandbox.discarded:
                return error_observation(call, requestor, "the sandbox was discarded while the call ran")
            return error_observation(call, requestor, f"the call ran past {self.limits.call_timeout_s}s and was killed")
        detail = f" (exit code {code}: {err.decode(errors='replace').strip()[-300:]})" if code else ""
        return answer_observation(call, requestor, out, detail)
