"""Filesystem sandboxes: one overlayfs mount per fork with its upper dir on tmpfs, or copies on tmpfs.

A working directory is the state.  :class:`OverlayBackend` holds what both
ways of keeping trees share (the scratch tmpfs, the bubblewrap jail, the
limits, running a call) on top of :class:`agentspec.snapshot.LineageBackend`
(tokens, lineage, locks); how a tree is made, frozen, forked, promoted and
dropped is one of two strategies, :class:`OverlayTrees` or :class:`CopyTrees`,
chosen at start (``mode``).  In ``overlay`` mode (root, or a process inside
``unshare -Urm``) every state is a stack of frozen *layers* plus a mutable
upper directory, mounted with overlayfs::

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

Where overlay mounts are refused (``mode="auto"``, the default, then picks
it), ``copy`` mode keeps every state as a full copy on tmpfs (snapshot and fork
cost the tree size; commit is still a pointer swap).  Both modes isolate
alike; ``mode`` only changes the cost.

What is promised and enforced (each one, or the backend refuses to start with a
:class:`SnapshotError` naming what is missing):

- confinement: every call runs under bubblewrap (:mod:`agentspec.sandbox.confinement`):
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
import re
import secrets
import stat
import tempfile
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
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
from agentspec.sandbox._layers import copy_tree, merge_layers, remove_tree
from agentspec.sandbox.confinement import Confinement, HostJail, check_confinement, host_jail, run_confined
from agentspec.sandbox.owner import owner_dead, owner_tag, start_time
from agentspec.sandbox.program import Limits, Op, ProgramCalls, SandboxProgram, runner_observation
from agentspec.snapshot import Branch, LineageBackend
from agentspec.types import Effect, Observation, Requestor, ToolCall

Mode = Literal["overlay", "copy"]
PREFIX = "agentspec-ws-"
"""Scratch roots: ``agentspec-ws-<pid>-<start time>-<id>`` (the owner's pid and start time, then the backend's id)."""
RUN_PREFIX = "agentspec-run-"
"""Run folders (:func:`run_folder`): ``agentspec-run-<pid>-<start time>-<label>-<random>``."""


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

    @property
    def view(self) -> Path:
        """The directory tools see."""
        return self.mount or self.upper

    @property
    def home(self) -> Path:
        """The scratch directory that holds the tree's own files (upper and work, or the copy)."""
        return self.upper.parent if self.work is not None else self.upper


@dataclass(eq=False, kw_only=True)
class OverlaySandbox(Branch[_Tree]):
    """A fork: its own overlay mount (or copy) of a snapshot."""

    prefix = "ovl"

    @property
    def path(self) -> Path:
        """The sandbox's working tree, as a directory on this host."""
        return self.state.view


def default_scratch() -> Path:
    """``$AGENTSPEC_SCRATCH``, else ``/dev/shm`` (tmpfs), else the temp dir."""
    chosen = os.environ.get("AGENTSPEC_SCRATCH")
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def scratch_bases() -> list[Path]:
    """Every folder scratch roots are made in unless a backend is given its own: ``$AGENTSPEC_SCRATCH``, ``/dev/shm``
    and the temp dir (which :func:`default_scratch` picks depends on the environment of the run that made them)."""
    bases = [default_scratch(), Path("/dev/shm"), Path(tempfile.gettempdir())]
    return [base for i, base in enumerate(bases) if base.is_dir() and base not in bases[:i]]


def _owner_gone(pid: str, start: str) -> bool:
    """Whether the process a scratch root's name records (``<pid>-<start time>``) is gone from this host."""
    if not pid.isdigit():
        return False  # not a name of ours
    if start.isdigit():
        return owner_dead(f"{owner_tag().split(':')[0]}:{pid}:{start}")
    # No start time was readable when it was made (no /proc): only a pid that no process has is gone.
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def run_folder(label: str) -> Path:
    """A new private folder in the temp dir for one run's files (a task's workspace source, its attachments, a
    world's root), named with its owner: ``agentspec-run-<pid>-<start time>-<label>-<random>``.  The run removes it
    as usual; when it was killed first (``kill -9`` runs no cleanup), the next call here sweeps it, as does
    ``agentspec sandbox sweep`` (:func:`sweep_scratch`).  Blocking: call it through a worker thread."""
    base = Path(tempfile.gettempdir())
    sweep_scratch(base)
    pid = os.getpid()
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:64]  # overlayfs refuses ',', ':' and '\\' in a source path
    return Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{pid}-{start_time(pid)}-{safe}-", dir=base))


def sweep_scratch(base: Path) -> list[Path]:
    """Unmount and delete what dead runs left under ``base``: scratch roots (``agentspec-ws-<pid>-<start>-<id>``,
    each a backend's trees) and run folders (``agentspec-run-<pid>-<start>-...``, :func:`run_folder`) whose owning
    process is gone, as a ``kill -9`` leaves them; never a live process's, nor another user's.  Returns what it
    removed (a root whose mounts this process cannot unmount is left as it is)."""
    swept = []
    for entry in [*base.glob(f"{PREFIX}*"), *base.glob(f"{RUN_PREFIX}*")]:
        parts = entry.name.removeprefix(PREFIX).removeprefix(RUN_PREFIX).split("-")
        if len(parts) < 3 or not _owner_gone(parts[0], parts[1]):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        _mounts.unmount_all(entry)
        if _mounts.mounts_under(entry):  # another mount namespace's (or root's): deleting would go through them
            continue
        remove_tree(entry)
        if not os.path.lexists(entry):
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


@dataclass
class _Scratch:
    """The backend's scratch root: ``layers/``, ``trees/``, ``mnt/`` and the ``live`` path tools see."""

    root: Path
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    trash: list[Path] = field(default_factory=list)

    def new_layer(self) -> _Layer:
        path = self.root / "layers" / str(next(self.counter))
        path.mkdir()
        return _Layer(path, self.trash)

    def new_dir(self, kind: str = "trees") -> Path:
        path = self.root / kind / str(next(self.counter))
        path.mkdir()
        return path

    @property
    def live(self) -> Path:
        return self.root / "live"


class _Trees(ABC):
    """How trees are held: the mechanism half of :class:`OverlayBackend` (a strategy)."""

    name: Mode

    def __init__(self, scratch: _Scratch) -> None:
        self.scratch = scratch

    @abstractmethod
    async def live(self, source: Path | None) -> _Tree:
        """The first live tree, equal to ``source`` (empty without one), visible at the scratch's live path."""

    @abstractmethod
    async def freeze(self, tree: _Tree) -> tuple[_Layer, ...]:
        """The tree's state as frozen layers (the caller holds its lock); the tree goes on writable."""

    @abstractmethod
    async def fork(self, layers: tuple[_Layer, ...]) -> _Tree:
        """A new writable tree holding the state of ``layers``."""

    @abstractmethod
    async def promote(self, tree: _Tree, live: _Tree) -> None:
        """Make ``tree`` visible at the live path instead of ``live``."""

    async def unmount(self, tree: _Tree) -> None:
        return None

    async def drop(self, tree: _Tree) -> None:
        """Unmount the tree and delete its files and every layer no snapshot holds any more."""
        await self.unmount(tree)
        doomed = [tree.home, *self.scratch.trash]
        self.scratch.trash.clear()
        if tree.mount is not None:
            doomed.append(tree.mount)
        for path in doomed:
            await anyio.to_thread.run_sync(remove_tree, path)


class CopyTrees(_Trees):
    """Every state a full copy on tmpfs: snapshot and fork cost the tree size, commit is a symlink swap."""

    name: Mode = "copy"

    async def live(self, source: Path | None) -> _Tree:
        live = self.scratch.new_dir()
        if source:
            await copy_tree(source, live)
        self.scratch.live.symlink_to(live)
        return _Tree(layers=(), upper=live, dirty=True)

    async def freeze(self, tree: _Tree) -> tuple[_Layer, ...]:
        if tree.dirty:
            layer = self.scratch.new_layer()
            await copy_tree(tree.upper, layer.path)
            tree.layers, tree.dirty = (layer,), False
        return tree.layers

    async def fork(self, layers: tuple[_Layer, ...]) -> _Tree:
        tree = _Tree(layers=layers, upper=self.scratch.new_dir())
        try:
            await copy_tree(layers[0].path, tree.upper)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.drop(tree)
            raise
        return tree

    async def promote(self, tree: _Tree, live: _Tree) -> None:
        link = self.scratch.live
        tmp = link.with_name(f"live.{next(self.scratch.counter)}")
        tmp.symlink_to(tree.upper)
        os.replace(tmp, link)  # atomic: the live path never dangles


class OverlayTrees(_Trees):
    """Every state a stack of frozen layers plus an upper dir, mounted with overlayfs: fork costs ~1 ms."""

    name: Mode = "overlay"

    def __init__(self, scratch: _Scratch, options: str, max_layers: int) -> None:
        super().__init__(scratch)
        self.options = options  # ",userxattr" inside a user namespace
        self.xattr = "user.overlay.opaque" if options else "trusted.overlay.opaque"
        self.max_layers = max_layers

    async def live(self, source: Path | None) -> _Tree:
        base = _Layer(source, None) if source else self.scratch.new_layer()
        return await self._new_tree((base,), self.scratch.live)

    async def freeze(self, tree: _Tree) -> tuple[_Layer, ...]:
        if not tree.dirty:
            return tree.layers
        layer = self.scratch.new_layer()
        old_home = tree.home
        with anyio.CancelScope(shield=True):  # never leave a tree unmounted
            await self.unmount(tree)
            layer.path.rmdir()
            os.rename(tree.upper, layer.path)
            layers = (*tree.layers, layer)
            if len(layers) > self.max_layers:
                layers = (layers[0], await self._squash(layers[1:]))
            tree.layers = layers
            self._fresh_upper(tree)
            self._mount(tree)
            tree.dirty = False
            await anyio.to_thread.run_sync(remove_tree, old_home)
        return tree.layers

    async def fork(self, layers: tuple[_Layer, ...]) -> _Tree:
        return await self._new_tree(layers, self.scratch.new_dir("mnt"))

    async def promote(self, tree: _Tree, live: _Tree) -> None:
        await self.unmount(tree)
        await self.unmount(live)
        live.mount = None
        tree.mount = self.scratch.live
        self._mount(tree)

    async def unmount(self, tree: _Tree) -> None:
        if tree.mount is not None:
            # Detached: a stray reference (a shell cd'd into the tree) must not block a commit.
            await anyio.to_thread.run_sync(_mounts.umount, tree.mount, True)

    async def _new_tree(self, layers: tuple[_Layer, ...], mountpoint: Path) -> _Tree:
        """An overlay tree on ``layers`` with a fresh upper, mounted at ``mountpoint``."""
        tree = _Tree(layers=layers, upper=Path())
        self._fresh_upper(tree)
        try:
            mountpoint.mkdir(exist_ok=True)
            self._mount(tree, mountpoint)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.drop(tree)
            raise
        return tree

    def _fresh_upper(self, tree: _Tree) -> None:
        base = self.scratch.new_dir()
        tree.upper, tree.work = base / "upper", base / "work"
        tree.upper.mkdir()
        tree.work.mkdir()

    def _mount(self, tree: _Tree, mountpoint: Path | None = None) -> None:
        mountpoint = mountpoint or tree.mount
        assert mountpoint is not None
        lower = ":".join(str(layer.path) for layer in reversed(tree.layers))
        options = f"lowerdir={lower},upperdir={tree.upper},workdir={tree.work}{self.options}"
        try:
            _mounts.mount("overlay", mountpoint, "overlay", 0, options)
        except OSError as exc:
            raise SnapshotError(f"overlay mount failed: {exc}") from exc
        tree.mount = mountpoint

    async def _squash(self, layers: tuple[_Layer, ...]) -> _Layer:
        merged = self.scratch.new_layer()
        paths = [layer.path for layer in layers]
        await anyio.to_thread.run_sync(merge_layers, paths, merged.path, self.xattr)
        return merged


class OverlayBackend(ProgramCalls, LineageBackend[_Tree]):
    """A working directory forked with overlayfs (or copies) on tmpfs.  See the module docstring.

    Use as ``async with OverlayBackend(program, source) as backend:`` (or
    ``await OverlayBackend.open(...)`` and ``await backend.close()``).  The live
    tree is visible at :attr:`workdir`; a sandbox's at ``sandbox.path``.
    ``mode``: ``"overlay"``, ``"copy"`` or ``"auto"`` (overlay where mounts are allowed).
    """

    resume_by = "replay"
    """A resumed run runs the committed steps again on a fresh one (:data:`agentspec.snapshot.ResumeBy`): the live
    state is made afresh for every episode and answers deterministically."""

    kind = "overlay"

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
        super().__init__()
        self.program = program
        self.source = source.resolve() if source is not None else None
        self.limits = limits or Limits()
        if self.limits.cpus is not None:
            raise ConfigError(
                "the overlay and copy backends cannot cap CPUs (no cgroup CPU controller): "
                "leave Limits.cpus unset, or use the docker backend"
            )
        self.max_layers = max(2, max_layers)
        self._wanted_mode = mode
        self._confinement = check_confinement(confinement)
        self._scratch = scratch or default_scratch()
        self._pids: PidsCgroups | None = None
        self._id = secrets.token_hex(4)
        self._root: Path | None = None
        self._tmpfs = False
        self._trees: _Trees | None = None
        self.jail: HostJail | None = None

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
        # The jail first: where bubblewrap is missing, that (and its way out, confinement="none") is what the
        # caller reads, not a limit that would only be refused next.
        self.jail = await host_jail(self._confinement, self.program.ops_file, tmp_bytes=disk)
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
        options = "" if _mounts.in_initial_user_namespace() else ",userxattr"
        overlay_ok = self._tmpfs and self._wanted_mode != "copy" and _probe_overlay(root, options)
        if self._wanted_mode == "overlay" and not overlay_ok:
            raise SnapshotError("overlayfs mounts are refused here (needs root or a user+mount namespace)")
        if self.jail.kind == "bwrap" and self.limits.pids is not None and not rlimit_nproc_binds():
            self._pids = await anyio.to_thread.run_sync(self._pids_cgroups)
        for sub in ("layers", "trees", "mnt"):
            (root / sub).mkdir()
        scratch = _Scratch(root)
        self._trees = OverlayTrees(scratch, options, self.max_layers) if overlay_ok else CopyTrees(scratch)
        self._set_live(await self._trees.live(self.source))

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
    def mode(self) -> Mode:
        """The strategy in use: ``"overlay"`` or ``"copy"`` (``"copy"`` until started)."""
        return self._trees.name if self._trees is not None else "copy"

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

    async def close(self) -> None:
        """Unmount and delete everything this backend made (the tmpfs goes in one unmount)."""
        root, self._root = self._root, None
        if root is None:
            return
        self._forget_sandboxes()
        pids, self._pids = self._pids, None
        if pids is not None:
            await anyio.to_thread.run_sync(pids.close)
        await anyio.to_thread.run_sync(_mounts.unmount_all, root)
        await anyio.to_thread.run_sync(remove_tree, root)

    # ------------------------------------------------------------------ the mechanism

    def _branch(self, state: _Tree, lineage: tuple[str, ...], token: str) -> OverlaySandbox:
        return OverlaySandbox(calls=self, state=state, lineage=lineage, token=token)

    def _require_trees(self) -> _Trees:
        if self._trees is None or self._root is None:
            raise SnapshotError("overlay backend is not started (or already closed)")
        return self._trees

    def _accepts(self, ref: object) -> bool:
        return isinstance(ref, OverlayRef) and ref.backend_id == self._id

    async def _freeze(self, tree: _Tree) -> OverlayRef:
        """The tree's layers (O(1) when it did not change since the last freeze)."""
        return OverlayRef(await self._require_trees().freeze(tree), self._id)

    async def _fork_state(self, ref: OverlayRef) -> _Tree:
        return await self._require_trees().fork(ref.layers)

    async def _promote(self, tree: _Tree, live: _Tree) -> _Tree:
        """The sandbox's tree becomes live (remounted, or relinked, at the live path); the old one goes."""
        trees = self._require_trees()
        await trees.promote(tree, live)
        await trees.drop(live)
        return tree

    async def _drop(self, tree: _Tree) -> None:
        await self._require_trees().drop(tree)

    async def _run(self, tree: _Tree, step: Op, call: ToolCall, requestor: Requestor) -> Observation:
        """Run one op in ``tree`` confined by the jail (the caller holds the tree's lock and its deadline)."""
        if self.effect(call.name) is not Effect.READ_ONLY:
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
        if self._pids is not None and self.limits.pids is not None:
            group = await anyio.to_thread.run_sync(self._pids.new_call, self.limits.pids)
            argv = ["/bin/sh", "-c", ENTER, str(group), *argv]
        try:
            code, out, err = await run_confined(argv, payload, cwd)
        finally:
            if group is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(remove_group, group)
        return runner_observation(call, requestor, code, out, err)

    def _require_jail(self) -> HostJail:
        if self.jail is None:
            raise SnapshotError("overlay backend is not started (or already closed)")
        return self.jail
