"""AppWorld for code actions: one jailed worker process per branch, so a fork's code cannot reach live.

Code actions (``actions="code"``) run the agent's own Python in the worker.  AppWorld's safety guard is no
barrier (``().__class__.__base__.__subclasses__()`` leads to any module, hence to the worker itself), so the
isolation of a speculative fork from live cannot live inside one process.  This backend gives every branch its
own worker (:mod:`envs.appworld.worker`, holding only its ``live``), each in its own bubblewrap jail: new user,
PID, network, IPC and UTS namespaces, no capabilities, the venv, the interpreter and the user's data read-only, a
private AppWorld root and ``/tmp`` (size-capped, in memory), its own root and ``/dev`` read-only, and RLIMIT_FSIZE
on every file it writes on the host (its log, its state).  Its ``/outbox`` is read-only but for one file, ``state``,
a host file bound there: the one file of the outbox on the host, so a fork's outbox holds at most
``max_state_bytes`` (:func:`jail_argv`), however many files its code tries to write there.  So whatever a fork's
code does, it sees only its own process
tree and its own pipe: it cannot change live's databases, signal live's worker (or agentspec), or write on live's
pipe.  Its replies are still untrusted: bounded (:class:`~envs.appworld.backend.WorkerPipe`), and a fork's broken
worker raises :class:`~agentspec.errors.SnapshotError`, which drops only that speculation.

- snapshot: the branch's worker ``save``s its state to its own ``/outbox/state``; agentspec copies the file (opened
  without following links, a regular file, bounded) into its own folder, so the jail keeps no handle on the copy,
  and empties it;
- fork: a worker started ahead (a *spare*, which loads the task while the episode goes on; the first one starts
  at the first snapshot) gets the snapshot hard-linked into its read-only ``/inbox`` and ``load``s it;
- commit: the fork's worker becomes live's, and the old live worker is killed; discard: the fork's worker is
  killed (with every process it started: the jail's PID namespace ends with it).

Without bubblewrap (or where it cannot make its namespaces) starting fails with a :class:`SnapshotError` that
says what to install; code actions never run unjailed.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import stat
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from agentspec.errors import AgentSpecError, EnvError, SnapshotError
from agentspec.sandbox.parent_guard import guarded
from envs.appworld.backend import MAX_REPLY_BYTES, WORKER, AppWorldTools, ToolCode, WorkerPipe, reply_output

MAX_STATE_BYTES = 4 * 1024**3
"""The largest branch state copied out of a jail (AppWorld's databases of one task are far smaller)."""
TMP_BYTES = 256 * 1024**2
"""The size of a jail's private ``/tmp`` (in memory)."""
ROOT_BYTES = 1024**3
"""The size of a jail's private AppWorld root (in memory; the user's data is mounted read-only inside it)."""
SHM_BYTES = 16 * 1024**2
"""The size of a jail's ``/dev/shm`` (in memory; the rest of ``/dev`` is read-only)."""
PATH = "/usr/local/bin:/usr/bin:/bin"
INSTALL_BWRAP = "apt-get install bubblewrap"
USERNS_HINT = ("unprivileged user namespaces look disabled: enable them (`sysctl -w kernel.unprivileged_userns_clone=1` "
               "on Debian, `sysctl -w user.max_user_namespaces=15000`), or use actions=api")
JAIL_ROOT = "/appworld"
INBOX, OUTBOX = "/inbox", "/outbox"
STATE = "state"


def jail_argv(bwrap: str, python: Path, data: Path, home: Path, max_file_bytes: int = MAX_STATE_BYTES) -> list[str]:
    """bubblewrap running the worker with a tmpfs of :data:`ROOT_BYTES` as its AppWorld root (``data`` read-only
    inside it), ``home/inbox`` read-only, and one writable file on the host, ``home/outbox/state`` (made by
    :func:`make_home`), as ``/outbox/state`` in a read-only ``/outbox``; every file it writes (its stderr log
    included) at most ``max_file_bytes`` long.  Its root and ``/dev`` are read-only too (bubblewrap leaves them
    writable, in memory, with no size cap); its ``/tmp``, AppWorld root and ``/dev/shm`` are size-capped tmpfs.

    The caller's uid is kept inside (not a fixed one): the venv, the interpreter and the data are the user's files,
    readable by their owner only, perhaps.  Capabilities are dropped and every namespace is new, so that uid reaches
    nothing outside the jail: the processes of other branches are not in its PID namespace.
    """
    venv = python.parent.parent
    interpreter = Path(os.path.realpath(python))
    prefix = interpreter.parent.parent  # the base installation the venv's python links to (its stdlib)
    binds = ["--ro-bind", str(venv.resolve()), str(venv)]
    if not prefix.is_relative_to("/usr"):
        binds += ["--ro-bind", str(prefix), str(prefix)]
    # Behind the guard: it ends the jail with agentspec, not with the (trio worker) thread that started it, as
    # --die-with-parent alone would; and it sets RLIMIT_FSIZE (soft and hard: the jail cannot raise it), so each
    # file the jail writes on the host (its log, its /outbox) stops at the limit, with EFBIG (Python ignores
    # SIGXFSZ, and the jail inherits that).
    return guarded([
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--size", str(TMP_BYTES), "--tmpfs", "/tmp", *binds,
        "--ro-bind", str(WORKER), "/agentspec/worker.py",
        "--size", str(ROOT_BYTES), "--tmpfs", JAIL_ROOT, "--ro-bind", str(data.resolve()), f"{JAIL_ROOT}/data",
        "--ro-bind", str(home / "inbox"), INBOX,
        # The outbox: a small tmpfs holding the state file's mount point, made read-only after the bind.
        "--size", str(64 * 1024), "--tmpfs", OUTBOX, "--bind", str(home / "outbox" / STATE), f"{OUTBOX}/{STATE}",
        "--remount-ro", OUTBOX, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", JAIL_ROOT,
        "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "APPWORLD_ROOT", JAIL_ROOT, "--setenv", "PYTHONUNBUFFERED", "1",
        str(python), "-I", "/agentspec/worker.py",
    ], file_bytes=max_file_bytes)  # fmt: skip


def make_home(home: Path) -> None:
    """A worker's folder: ``inbox`` (read-only in the jail) and ``outbox`` holding the empty file ``state``, the one
    file the jail may write there."""
    for part in ("inbox", "outbox"):
        (home / part).mkdir(parents=True)
    os.close(os.open(home / "outbox" / STATE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))


def copy_out(outbox: Path, target: Path, limit: int = MAX_STATE_BYTES) -> None:
    """Copy the regular file ``outbox/state`` (written in a jail) to ``target``, never following a link the jail
    may have put there, and empty it (the jail writes the next state into the same file: it is bound there).
    SnapshotError when it is not a regular file or is over ``limit`` bytes; it is emptied then too."""
    folder = os.open(outbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            # O_NONBLOCK: a FIFO put in its place must not block the open.
            source = os.open(STATE, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except OSError as exc:
            what = "a link" if exc.errno == errno.ELOOP else exc.strerror
            raise SnapshotError(f"the AppWorld worker's saved state cannot be read ({what})") from None
        try:
            info = os.fstat(source)
            if not stat.S_ISREG(info.st_mode):
                raise SnapshotError("the AppWorld worker's saved state is not a regular file")
            with open(source, "rb", closefd=False) as src, open(target, "xb") as dst:
                copied = 0
                while chunk := src.read(1 << 20):
                    copied += len(chunk)
                    if copied > limit:
                        raise SnapshotError(f"the AppWorld worker's saved state is over {limit} bytes")
                    dst.write(chunk)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        finally:
            if stat.S_ISREG(os.fstat(source).st_mode):
                os.ftruncate(source, 0)  # nothing of it is kept on the host, copied or not
            os.close(source)
    finally:
        os.close(folder)


def empty_outbox(outbox: Path) -> int:
    """Empty ``outbox/state`` (never following a link); the bytes it held (0 when it is not a regular file)."""
    try:
        fd = os.open(outbox / STATE, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return 0
        os.ftruncate(fd, 0)
        return info.st_size
    finally:
        os.close(fd)


class _StateFile:
    """A snapshot: a branch's state in a file of agentspec's (removed once no Python object holds it)."""

    def __init__(self, backend: IsolatedAppWorldBackend, path: Path) -> None:
        self.backend = backend
        self.path = path
        weakref.finalize(self, path.unlink, missing_ok=True)


class IsolatedAppWorldBackend(AppWorldTools[WorkerPipe]):
    """One AppWorld task, one jailed worker per branch (see the module docstring); a state is a worker."""

    def __init__(self, python: str | Path, root: str | Path, data: str | Path, task_id: str,
                 tools: Mapping[str, ToolCode], *, experiment: str = "agentspec", timeout_s: int = 100,
                 max_reply_bytes: int = MAX_REPLY_BYTES, max_state_bytes: int = MAX_STATE_BYTES) -> None:
        super().__init__(tools)
        self.python = Path(python)
        self.root = Path(root)
        """agentspec's folder for this backend: each worker's home, the snapshots, the workers' logs."""
        self.data = Path(data)
        self.task_id = task_id
        self.experiment = experiment
        self.timeout_s = timeout_s
        self.max_reply_bytes = max_reply_bytes
        self.max_state_bytes = max_state_bytes
        self._bwrap: str | None = None
        self._spare: WorkerPipe | None = None
        self._homes: dict[WorkerPipe, Path] = {}
        self._ids = itertools.count(1)

    # --- workers ---------------------------------------------------------------------------------

    async def _spawn(self) -> WorkerPipe:
        """A new jailed worker, loading the task (a sandbox's until it is committed)."""
        assert self._bwrap is not None
        home = self.root / f"worker-{next(self._ids)}"
        await anyio.to_thread.run_sync(make_home, home)
        argv = jail_argv(self._bwrap, self.python, self.data, home, max_file_bytes=self.max_state_bytes)
        worker = WorkerPipe(argv, env={"PATH": PATH}, cwd=home,
                            log_path=home.with_suffix(".log"), max_reply_bytes=self.max_reply_bytes,
                            error=SnapshotError)
        self._homes[worker] = home
        try:
            await worker.start(task_id=self.task_id, experiment=self.experiment, timeout_s=self.timeout_s)
        except BaseException:
            await self._end(worker)
            raise
        return worker

    async def _replenish(self) -> None:
        """Start the spare worker, unless there is one (the next fork takes it, loaded by then, perhaps)."""
        if self._spare is not None:
            return
        spare = await self._spawn()
        if self._spare is None:
            self._spare = spare
        else:  # a concurrent fork started one meanwhile
            await self._end(spare)

    async def _end(self, worker: WorkerPipe) -> None:
        """Kill a worker and remove its home (never following what its jail left there)."""
        with anyio.CancelScope(shield=True):
            await worker.kill()
            home = self._homes.pop(worker, None)
            if home is not None:
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(home, ignore_errors=True))

    async def start(self) -> None:
        found = shutil.which("bwrap")
        self._bwrap = os.path.abspath(found) if found else None  # absolute: the jail runs with a fixed PATH
        if self._bwrap is None:
            raise SnapshotError("AppWorld code actions run each branch in a bubblewrap jail, and bubblewrap (bwrap) "
                                f"is not installed: {INSTALL_BWRAP} (or use actions=api, which runs no agent code)")
        live = await self._spawn()
        live.error = EnvError
        try:
            opened = await live.open()
        except BaseException as exc:
            await self._end(live)
            if isinstance(exc, EnvError) and "bwrap" in str(exc):
                raise SnapshotError(f"bubblewrap cannot make the AppWorld worker's jail here: {exc}; "
                                    f"{USERNS_HINT}") from None
            raise
        self.instruction = opened.get("instruction", "")
        self._set_live(live)

    async def close(self) -> None:
        self._forget_sandboxes()
        self._spare = None
        for worker in list(self._homes):  # live, the sandboxes', the spare, and any a failed fork left
            await self._end(worker)

    # --- the strategy -------------------------------------------------------------------------------

    async def _execute_code(self, state: WorkerPipe, code: str) -> str:
        return reply_output(await state.request("execute", branch="live", code=code), state.error)

    async def _freeze(self, state: WorkerPipe) -> _StateFile:
        await self._replenish()  # forks are coming: start loading the first one's worker now
        outbox = self._homes[state] / "outbox"
        try:
            await state.request("save", branch="live", path=f"{OUTBOX}/{STATE}")
        except AgentSpecError as exc:
            written = await anyio.to_thread.run_sync(empty_outbox, outbox)
            if written >= self.max_state_bytes:
                raise state.error(f"the branch's state is over the {self.max_state_bytes:,} bytes its outbox may hold "
                                  f"(max_state_bytes), and was not saved: {exc}") from None
            raise
        target = self.root / f"snapshot-{next(self._ids)}"
        try:
            await anyio.to_thread.run_sync(copy_out, outbox, target, self.max_state_bytes)
        except SnapshotError as exc:
            raise state.error(str(exc)) from None
        return _StateFile(self, target)

    def _accepts(self, ref: Any) -> bool:
        return isinstance(ref, _StateFile) and ref.backend is self

    async def _fork_state(self, ref: _StateFile) -> WorkerPipe:
        worker, self._spare = self._spare, None
        if worker is None:
            worker = await self._spawn()
        try:
            # A hard link into the read-only inbox: the jail can read the snapshot, not change agentspec's file.
            await anyio.to_thread.run_sync(os.link, ref.path, self._homes[worker] / "inbox" / STATE)
            await worker.request("load", path=f"{INBOX}/{STATE}")
        except BaseException:
            await self._end(worker)
            raise
        await self._replenish()  # the next fork's worker loads the task meanwhile
        return worker

    async def _promote(self, state: WorkerPipe, live: WorkerPipe) -> WorkerPipe:
        state.error = EnvError  # it holds live state from now on
        await self._end(live)
        return state

    async def _drop(self, state: WorkerPipe) -> None:
        await self._end(state)

    # --- evaluation ----------------------------------------------------------------------------------

    async def evaluate(self) -> dict[str, Any]:
        """AppWorld's evaluation of the live state: ``success``, ``num_tests``, ``passes``, ``failures``, ..."""
        return (await self._require_live().request("evaluate"))["evaluation"]
